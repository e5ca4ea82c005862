package codeexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

// A worker builds the tool once and hands it each code_execution job. Here
// xAI's API is a local server answering in its wire format.
func ExampleNewCodeExecution() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"model":"grok-4.6","status":"completed","output":[
		  {"type":"code_interpreter_call","status":"completed","code":"print(sum([40, 42, 44]) / 3)",
		   "outputs":[{"type":"logs","logs":"{\"stdout\":\"42.0\\n\",\"stderr\":\"\",\"exit_code\":0,\"command_timed_out\":false}"}]},
		  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Mean: "},{"type":"output_text","text":"42. Verified."}]}],
		 "usage":{"input_tokens":90,"output_tokens":12}}`))
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	tool, err := codeexec.NewCodeExecution(&codeexec.Config{
		Providers: map[string]*codeexec.ProviderConfig{
			"xai": {APIKey: "xai-example-key", BaseURL: srv.URL},
		},
		HTTPClient: &http.Client{Transport: tr},
		Getenv:     func(string) string { return "" },
		Logger:     slog.New(slog.DiscardHandler),
		OnBreakerChange: func(c codeexec.BreakerChange) {
			fmt.Println("breaker", c.Provider, c.Model, c.To)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := tool.Handle(context.Background(), &contracts.Job{
		ID: "job-1", Tool: codeexec.ToolName, Session: "s1",
		Input: json.RawMessage(`{"task":"Mean of 40, 42 and 44?"}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var d codeexec.Details
	_ = json.Unmarshal(out, &d)
	fmt.Println(d.Provider, d.Model, d.UsedCodeExecution)
	fmt.Println(d.Content)
	fmt.Printf("%s -> %q (%s)\n", d.Runs[0].Code, d.Runs[0].Output, d.Runs[0].Outcome)
	fmt.Printf("$%.3f %s\n", *d.Usage.CostUSD, d.Usage.CostSource)
	// Output:
	// xai grok-4.6 true
	// Mean: 42. Verified.
	// print(sum([40, 42, 44]) / 3) -> "42.0\n" (ok)
	// $0.005 estimate
}

// Without credentials the job fails with the code_execution contract's structured payload,
// not a panic and not a retry.
func ExampleCodeExecution_Handle_missingCredentials() {
	tool, _ := codeexec.NewCodeExecution(&codeexec.Config{
		Getenv: func(string) string { return "" },
		Logger: slog.New(slog.DiscardHandler),
	})
	_, err := tool.Handle(context.Background(), &contracts.Job{
		ID: "job-2", Tool: codeexec.ToolName, Session: "s1",
		Input: json.RawMessage(`{"task":"Mean of 1, 2 and 3?"}`),
	})
	var ce *contracts.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Code, ce.Retryable)
		fmt.Println(string(ce.Details))
	}
	// Output:
	// missing_credentials false
	// {"error":"missing_xai_api_key","message":"code_execution needs xAI credentials. Set `XAI_API_KEY` in the worker environment, or configure `providers.xai.apiKey` in the worker config.","docs":"docs/tools/code-execution"}
}
