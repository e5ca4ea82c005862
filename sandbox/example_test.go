package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolq/toolq/sandbox"
)

// shippingBridge answers shipping_list at once and leaves every other call
// pending, to be settled through Resume.
type shippingBridge struct{ sandbox.CatalogBridge }

func (shippingBridge) Call(_ context.Context, call sandbox.ToolCall) (sandbox.CallOutcome, error) {
	if call.Tool.Name == "shipping_list" {
		return sandbox.CallOutcome{Value: json.RawMessage(`[{"id":"s1","paid":false,"tons":12},{"id":"s2","paid":true,"tons":30}]`)}, nil
	}
	return sandbox.CallOutcome{Pending: true}, nil
}

func ExampleEngine_Exec() {
	ctx := context.Background()
	engine, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{
		SnapshotKey: []byte("example key: use 32 random bytes"),
	})
	if err != nil {
		panic(err)
	}
	defer engine.Close(ctx)

	catalog := []sandbox.Tool{{CatalogEntry: sandbox.CatalogEntry{
		ID: "openclaw:shipping:shipping_list", Name: "shipping_list", Description: "List shipments.",
		Source: sandbox.SourceOpenClaw, Input: "{}",
	}}}
	out, err := engine.Exec(ctx, &sandbox.ExecRequest{
		Input: sandbox.Input{Code: `
const [shipmentTool] = await tools.search("list shipments");
const shipments = await tools.callValue(shipmentTool.id, {});
text("checked " + shipments.length + " shipments");
return shipments.filter((s) => !s.paid && s.tons > 10).map((s) => s.id);`},
		Catalog: catalog,
		Bridge:  shippingBridge{},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Result.Status, string(out.Result.Value), out.Result.Output[0].Text)
	// Output: completed ["s1"] checked 2 shipments
}

func ExampleEngine_Resume() {
	ctx := context.Background()
	engine, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{
		SnapshotKey: []byte("example key: use 32 random bytes"),
	})
	if err != nil {
		panic(err)
	}
	defer engine.Close(ctx)

	catalog := []sandbox.Tool{{CatalogEntry: sandbox.CatalogEntry{
		ID: "client:app:select_file", Name: "select_file", Description: "Ask the user to pick a file.",
		Source: sandbox.SourceClient, Input: "{ prompt: string }",
	}}}
	out, err := engine.Exec(ctx, &sandbox.ExecRequest{
		Input:   sandbox.Input{Code: `const file = await tools.select_file({prompt: "Pick one"}); return "picked " + file`},
		Catalog: catalog,
		Bridge:  shippingBridge{},
		RunID:   "run-42",
	})
	if err != nil {
		panic(err)
	}
	call := out.Result.PendingToolCalls[0]
	fmt.Println(out.Result.Status, out.Result.RunID, out.Result.Reason, call.CallID, call.ToolID, string(call.Input))

	// Later, perhaps in another process holding the same key: resume the
	// stored snapshot with the call's result.
	out, err = engine.Resume(ctx, &sandbox.ResumeRequest{
		Snapshot:    out.Snapshot,
		Settlements: []sandbox.Settlement{{CallID: call.CallID, Value: json.RawMessage(`"README.md"`)}},
		Bridge:      shippingBridge{},
		// The snapshot is signed for this run and step: it restores as
		// nothing else.
		RunID: "run-42", Step: out.Step,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Result.Status, string(out.Result.Value))
	// Output:
	// waiting run-42 pending_tools call_1 client:app:select_file {"prompt":"Pick one"}
	// completed "picked README.md"
}
