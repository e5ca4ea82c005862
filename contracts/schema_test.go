package contracts_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// schemas is the compiled pair of embedded schemas, with the raw documents
// for structural checks.
type schemas struct {
	job, event       *jsonschema.Schema
	jobDoc, eventDoc map[string]any
}

func compileSchemas(t *testing.T) *schemas {
	t.Helper()
	s := &schemas{}
	s.job, s.jobDoc = compileSchema(t, contracts.JobSchema())
	s.event, s.eventDoc = compileSchema(t, contracts.EventSchema())
	return s
}

func compileSchema(t *testing.T, raw []byte) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	obj, ok := doc.(map[string]any)
	require.True(t, ok, "schema is not an object")
	id, ok := obj["$id"].(string)
	require.True(t, ok, "schema has no $id")
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", obj["$schema"])
	c := jsonschema.NewCompiler()
	c.AssertFormat() // date-time must be checked, as time.Time's decoder does
	require.NoError(t, c.AddResource(id, doc))
	sch, err := c.Compile(id)
	require.NoError(t, err)
	return sch, obj
}

// validate reports whether data is one JSON document the schema accepts.
func validate(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func TestSchemasAreEmbeddedCopies(t *testing.T) {
	t.Parallel()
	for _, get := range []func() []byte{contracts.JobSchema, contracts.EventSchema} {
		a := get()
		require.True(t, json.Valid(a))
		a[0] = 'X' // a caller scribbling on its copy does not change the next one
		require.Equal(t, byte('{'), get()[0])
	}
	var doc map[string]any
	require.NoError(t, json.Unmarshal(contracts.JobSchema(), &doc))
	require.Contains(t, doc["description"], "rolling upgrade")
	require.NoError(t, json.Unmarshal(contracts.EventSchema(), &doc))
	require.Contains(t, doc["description"], "rolling upgrade")
}

// resolve follows a local $ref and picks the object branch of an anyOf
// (optional properties are "null or X").
func resolve(t *testing.T, root, node map[string]any) map[string]any {
	t.Helper()
	for range 8 {
		if ref, ok := node["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			require.True(t, ok, "non-local $ref %q", ref)
			defs, _ := root["$defs"].(map[string]any)
			next, ok := defs[name].(map[string]any)
			require.True(t, ok, "$ref %q does not resolve", ref)
			node = next
			continue
		}
		if alts, ok := node["anyOf"].([]any); ok && node["properties"] == nil {
			var obj map[string]any
			for _, b := range alts {
				bm, _ := b.(map[string]any)
				if bm["$ref"] != nil || bm["properties"] != nil {
					obj = bm
				}
			}
			require.NotNil(t, obj, "anyOf without an object branch")
			node = obj
			continue
		}
		return node
	}
	t.Fatal("$ref loop")
	return nil
}

// jsonFields returns the JSON names of typ's fields.
func jsonFields(typ reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

var contractsPkg = reflect.TypeFor[contracts.Job]().PkgPath()

// compareProperties checks that the schema node lists exactly the JSON
// properties of typ, recursing into the contracts structs it contains.
func compareProperties(t *testing.T, root, node map[string]any, typ reflect.Type, path string) {
	t.Helper()
	node = resolve(t, root, node)
	props, ok := node["properties"].(map[string]any)
	require.True(t, ok, "%s: schema has no properties", path)
	fields := jsonFields(typ)
	require.ElementsMatch(t, slices.Collect(maps.Keys(fields)), slices.Collect(maps.Keys(props)),
		"%s: Go fields and schema properties differ", path)
	for _, r := range node["required"].([]any) {
		require.Contains(t, props, r, "%s: required %v is not a property", path, r)
	}
	for name, f := range fields {
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == contractsPkg {
			compareProperties(t, root, props[name].(map[string]any), ft, path+"."+name)
		}
	}
}

func TestSchemaPropertiesMatchGoTypes(t *testing.T) {
	t.Parallel()
	s := compileSchemas(t)
	compareProperties(t, s.jobDoc, s.jobDoc, reflect.TypeFor[contracts.Job](), "job")
	compareProperties(t, s.eventDoc, s.eventDoc, reflect.TypeFor[contracts.Event](), "event")
}

func TestSchemaEnumsMatchGo(t *testing.T) {
	t.Parallel()
	s := compileSchemas(t)
	defs := s.eventDoc["$defs"].(map[string]any)

	var statuses []contracts.Status
	for _, v := range defs["status"].(map[string]any)["enum"].([]any) {
		statuses = append(statuses, contracts.Status(v.(string)))
	}
	require.Equal(t, contracts.Statuses, statuses)

	var codes []contracts.ErrorCode
	for _, v := range defs["code"].(map[string]any)["enum"].([]any) {
		codes = append(codes, contracts.ErrorCode(v.(string)))
	}
	require.Equal(t, contracts.ErrorCodes, codes)

	// One if/then per status ties the CloudEvents type to data.status.
	types := map[contracts.Status]string{}
	for _, c := range s.eventDoc["allOf"].([]any) {
		cm := c.(map[string]any)
		st := cm["if"].(map[string]any)["properties"].(map[string]any)["data"].(map[string]any)["properties"].(map[string]any)["status"].(map[string]any)["const"].(string)
		types[contracts.Status(st)] = cm["then"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)["const"].(string)
	}
	require.Len(t, types, len(contracts.Statuses))
	for _, st := range contracts.Statuses {
		require.Equal(t, contracts.EventTypePrefix+string(st), types[st])
	}

	// The id and tool rules are the Go ones.
	for _, doc := range []map[string]any{s.jobDoc, s.eventDoc} {
		d := doc["$defs"].(map[string]any)
		require.Equal(t, "^[A-Za-z0-9_-]{1,128}$", d["id"].(map[string]any)["pattern"])
		require.EqualValues(t, json.Number(fmt.Sprint(contracts.MaxIDLength)), d["tool"].(map[string]any)["maxLength"])
	}
	props := s.jobDoc["properties"].(map[string]any)
	require.Equal(t, json.Number(fmt.Sprint(contracts.MaxJobTimeout.Milliseconds())), props["timeout_ms"].(map[string]any)["maximum"])
	require.Equal(t, json.Number(fmt.Sprint(contracts.MaxAttemptsLimit)), props["max_attempts"].(map[string]any)["maximum"])
}

func fullJob() *contracts.Job {
	return &contracts.Job{
		ID:          "job_01-A",
		Tool:        "code_mode.exec",
		Session:     "sess-1",
		Input:       json.RawMessage(`{"code":"1+1","language":"javascript","n":[1,2.5,null]}`),
		Parent:      &contracts.Parent{RunID: "run1", CallID: "call-7", Tool: contracts.ToolCodeModeResult},
		TimeoutMs:   contracts.MaxJobTimeout.Milliseconds(),
		MaxAttempts: contracts.MaxAttemptsLimit,
		Progress:    true,
		CreatedAt:   time.Date(2025, 3, 4, 5, 6, 7, 890, time.FixedZone("", 3600)),
		Meta:        map[string]string{"agent": "é", "turn": "3"},
	}
}

func TestMarshalledGoValuesValidate(t *testing.T) {
	t.Parallel()
	s := compileSchemas(t)

	jobs := []*contracts.Job{
		fullJob(),
		{ID: "j", Tool: "exec", Session: "s"},
		{ID: strings.Repeat("a", 128), Tool: strings.Repeat("t.", 63) + "tt", Session: "s", CreatedAt: time.Now()},
	}
	for _, j := range jobs {
		require.NoError(t, j.Validate())
		data, err := json.Marshal(j)
		require.NoError(t, err)
		require.NoError(t, validate(s.job, data), "%s", data)
		_, err = contracts.DecodeJob(data)
		require.NoError(t, err)
	}

	now := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, st := range contracts.Statuses {
		for i, j := range jobs {
			ev := contracts.NewEvent("/worker/w1", j, st, i+1, now)
			ev.Data.Attempt = i
			if st.Terminal() {
				ev.Data.Result = json.RawMessage(`{"ok":true}`)
			}
			data, err := json.Marshal(ev)
			require.NoError(t, err)
			require.NoError(t, validate(s.event, data), "%s", data)
			_, err = contracts.DecodeEvent(data)
			require.NoError(t, err)
		}
	}
	// The producer's cancel of a job no event named yet carries no tool.
	cancelled := contracts.NewEvent("/producer", &contracts.Job{ID: "j", Session: "s"}, contracts.StatusCancelled, 1, now)
	cancelled.Data.Error = contracts.Errorf(contracts.CodeCancelled, "cancelled by request")
	for _, code := range contracts.ErrorCodes {
		ev := *cancelled
		ev.Data.Error = &contracts.Error{Code: code, Message: "m", Retryable: true, Details: json.RawMessage(`{"env":["XAI_API_KEY"]}`)}
		data, err := json.Marshal(&ev)
		require.NoError(t, err)
		require.NoError(t, validate(s.event, data), "%s", data)
		_, err = contracts.DecodeEvent(data)
		require.NoError(t, err)
	}
}

// obj renders a JSON object from base with the given top-level properties
// replaced (a nil value deletes the property). Values are raw JSON.
func obj(base string, set map[string]string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		panic(err)
	}
	for k, v := range set {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = json.RawMessage(v)
		}
	}
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(m[k])
	}
	b.WriteByte('}')
	return b.String()
}

const minJob = `{"id":"j1","tool":"exec","session":"s1"}`

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

func meta(n int) string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

var validJobs = map[string]string{
	"minimal":        minJob,
	"full":           mustMarshal(fullJob()),
	"unknown fields": obj(minJob, map[string]string{"priority": `7`, "future": `{"a":[1]}`, "ID_suffix": `"x"`}),
	"nulls for optional fields": obj(minJob, map[string]string{
		"input": `null`, "parent": `null`, "timeout_ms": `null`, "max_attempts": `null`,
		"progress": `null`, "created_at": `null`, "meta": `null`,
	}),
	"zero values":        obj(minJob, map[string]string{"timeout_ms": `0`, "max_attempts": `0`, "progress": `false`, "meta": `{}`}),
	"id of 128 bytes":    obj(minJob, map[string]string{"id": q(strings.Repeat("Z", 128))}),
	"tool of 128 bytes":  obj(minJob, map[string]string{"tool": q(strings.Repeat("ab.", 42) + "ab")}),
	"dotted tool":        obj(minJob, map[string]string{"tool": `"mcp.github.create_issue"`}),
	"32 meta entries":    obj(minJob, map[string]string{"meta": meta(32)}),
	"meta of 256 bytes":  obj(minJob, map[string]string{"meta": `{` + q(strings.Repeat("k", 256)) + `:` + q(strings.Repeat("v", 256)) + `}`}),
	"time with fraction": obj(minJob, map[string]string{"created_at": `"2024-02-29T23:59:59.123456789-07:30"`}),
	"input scalar":       obj(minJob, map[string]string{"input": `"just text"`}),
	"surrounding space":  " \t\r\n" + minJob + "\n\t ",
	"parent":             obj(minJob, map[string]string{"parent": `{"run_id":"r","call_id":"c","extra":1}`}),
	"parent with tool":   obj(minJob, map[string]string{"parent": `{"run_id":"r","call_id":"c","tool":"batch.result"}`}),
	"parent tool null":   obj(minJob, map[string]string{"parent": `{"run_id":"r","call_id":"c","tool":null}`}),
	"parent tool empty":  obj(minJob, map[string]string{"parent": `{"run_id":"r","call_id":"c","tool":""}`}),
}

var invalidJobs = map[string]string{
	"empty":                   ``,
	"not JSON":                `{id:1}`,
	"truncated":               `{"id":"j1","tool":"exec"`,
	"null document":           `null`,
	"array":                   `[` + minJob + `]`,
	"string":                  `"` + minJob + `"`,
	"trailing object":         minJob + `{}`,
	"trailing brace":          minJob + `}`,
	"trailing bracket":        minJob + `]`,
	"trailing comma":          minJob + `,`,
	"leading no-break space":  "\u00a0" + minJob,
	"missing id":              obj(minJob, map[string]string{"id": ""}),
	"missing tool":            obj(minJob, map[string]string{"tool": ""}),
	"missing session":         obj(minJob, map[string]string{"session": ""}),
	"null id":                 obj(minJob, map[string]string{"id": `null`}),
	"numeric id":              obj(minJob, map[string]string{"id": `12`}),
	"empty id":                obj(minJob, map[string]string{"id": `""`}),
	"id of 129 bytes":         obj(minJob, map[string]string{"id": q(strings.Repeat("Z", 129))}),
	"id with space":           obj(minJob, map[string]string{"id": `"a b"`}),
	"id with dot":             obj(minJob, map[string]string{"id": `"a.b"`}),
	"id with star":            obj(minJob, map[string]string{"id": `"*"`}),
	"id with gt":              obj(minJob, map[string]string{"id": `">"`}),
	"id with unicode":         obj(minJob, map[string]string{"id": `"jé"`}),
	"id with newline":         obj(minJob, map[string]string{"id": `"a\n"`}),
	"session with wildcard":   obj(minJob, map[string]string{"session": `"s.*"`}),
	"empty tool":              obj(minJob, map[string]string{"tool": `""`}),
	"tool leading dot":        obj(minJob, map[string]string{"tool": `".exec"`}),
	"tool trailing dot":       obj(minJob, map[string]string{"tool": `"exec."`}),
	"tool empty token":        obj(minJob, map[string]string{"tool": `"a..b"`}),
	"tool wildcard":           obj(minJob, map[string]string{"tool": `"mcp.>"`}),
	"tool of 129 bytes":       obj(minJob, map[string]string{"tool": q(strings.Repeat("ab.", 42) + "abc")}),
	"parent empty":            obj(minJob, map[string]string{"parent": `{}`}),
	"parent bad run id":       obj(minJob, map[string]string{"parent": `{"run_id":"r.1","call_id":"c"}`}),
	"parent missing call id":  obj(minJob, map[string]string{"parent": `{"run_id":"r"}`}),
	"parent is a string":      obj(minJob, map[string]string{"parent": `"r/c"`}),
	"parent bad tool":         obj(minJob, map[string]string{"parent": `{"run_id":"r","call_id":"c","tool":"a..b"}`}),
	"parent tool a number":    obj(minJob, map[string]string{"parent": `{"run_id":"r","call_id":"c","tool":7}`}),
	"negative timeout":        obj(minJob, map[string]string{"timeout_ms": `-1`}),
	"timeout over 24h":        obj(minJob, map[string]string{"timeout_ms": `86400001`}),
	"fractional timeout":      obj(minJob, map[string]string{"timeout_ms": `1.5`}),
	"timeout as string":       obj(minJob, map[string]string{"timeout_ms": `"10"`}),
	"huge timeout":            obj(minJob, map[string]string{"timeout_ms": `1e400`}),
	"attempts over limit":     obj(minJob, map[string]string{"max_attempts": `101`}),
	"negative attempts":       obj(minJob, map[string]string{"max_attempts": `-1`}),
	"progress as string":      obj(minJob, map[string]string{"progress": `"yes"`}),
	"created_at not a time":   obj(minJob, map[string]string{"created_at": `"yesterday"`}),
	"created_at date only":    obj(minJob, map[string]string{"created_at": `"2024-01-01"`}),
	"created_at no offset":    obj(minJob, map[string]string{"created_at": `"2024-01-01T00:00:00"`}),
	"created_at as number":    obj(minJob, map[string]string{"created_at": `1700000000`}),
	"33 meta entries":         obj(minJob, map[string]string{"meta": meta(33)}),
	"meta empty key":          obj(minJob, map[string]string{"meta": `{"":"v"}`}),
	"meta key of 257 bytes":   obj(minJob, map[string]string{"meta": `{` + q(strings.Repeat("k", 257)) + `:"v"}`}),
	"meta value of 257 bytes": obj(minJob, map[string]string{"meta": `{"k":` + q(strings.Repeat("v", 257)) + `}`}),
	"meta value a number":     obj(minJob, map[string]string{"meta": `{"k":1}`}),
	"meta is an array":        obj(minJob, map[string]string{"meta": `["k"]`}),
}

const minEvent = `{"specversion":"1.0","type":"toolq.job.completed","source":"/worker/w1","id":"j1/completed/1",` +
	`"data":{"job_id":"j1","session":"s1","status":"completed"}}`

// data renders minEvent with its data object replaced by set applied to the
// minimal data.
func data(set map[string]string) string {
	return obj(minEvent, map[string]string{"data": obj(`{"job_id":"j1","session":"s1","status":"completed"}`, set)})
}

var validEvents = map[string]string{
	"minimal": minEvent,
	"full": obj(minEvent, map[string]string{
		"subject": `"j1"`, "time": `"2025-01-02T03:04:05.000000006Z"`, "datacontenttype": `"application/json"`,
		"data": `{"job_id":"j1","session":"s1","tool":"code_mode.exec","status":"completed","attempt":2,` +
			`"result":{"v":[1,"x",null]},"error":{"code":"timeout","message":"m","retryable":true,"details":{"a":1}},` +
			`"parent":{"run_id":"r","call_id":"c"},"meta":{"k":"v"}}`,
	}),
	"extension attributes": obj(minEvent, map[string]string{"traceparent": `"00-abc-def-01"`, "dataschema": `"x"`}),
	"unknown data fields":  data(map[string]string{"telemetry": `{"nested":3}`}),
	"nulls for optional fields": obj(data(map[string]string{
		"tool": `null`, "attempt": `null`, "result": `null`, "error": `null`, "parent": `null`, "meta": `null`,
	}), map[string]string{"subject": `null`, "time": `null`, "datacontenttype": `null`}),
	"empty tool (cancel before any event)": data(map[string]string{"tool": `""`}),
	"error without message":                data(map[string]string{"error": `{"code":"denied"}`}),
	"parked status": obj(data(map[string]string{"status": `"approval_pending"`}),
		map[string]string{"type": `"toolq.job.approval_pending"`}),
}

var invalidEvents = map[string]string{
	"empty":                   ``,
	"array":                   `[]`,
	"trailing brace":          minEvent + `}`,
	"trailing object":         minEvent + ` {}`,
	"missing specversion":     obj(minEvent, map[string]string{"specversion": ""}),
	"specversion 0.3":         obj(minEvent, map[string]string{"specversion": `"0.3"`}),
	"specversion as number":   obj(minEvent, map[string]string{"specversion": `1.0`}),
	"missing type":            obj(minEvent, map[string]string{"type": ""}),
	"type of another status":  obj(minEvent, map[string]string{"type": `"toolq.job.failed"`}),
	"type of another prefix":  obj(minEvent, map[string]string{"type": `"com.example.completed"`}),
	"missing source":          obj(minEvent, map[string]string{"source": ""}),
	"empty source":            obj(minEvent, map[string]string{"source": `""`}),
	"missing id":              obj(minEvent, map[string]string{"id": ""}),
	"empty id":                obj(minEvent, map[string]string{"id": `""`}),
	"subject as number":       obj(minEvent, map[string]string{"subject": `1`}),
	"time not a time":         obj(minEvent, map[string]string{"time": `"now"`}),
	"missing data":            obj(minEvent, map[string]string{"data": ""}),
	"null data":               obj(minEvent, map[string]string{"data": `null`}),
	"data as string":          obj(minEvent, map[string]string{"data": `"{}"`}),
	"unknown status":          obj(data(map[string]string{"status": `"exploded"`}), map[string]string{"type": `"toolq.job.exploded"`}),
	"missing status":          data(map[string]string{"status": ""}),
	"missing job_id":          data(map[string]string{"job_id": ""}),
	"bad job_id":              data(map[string]string{"job_id": `"j.1"`}),
	"missing session":         data(map[string]string{"session": ""}),
	"bad session":             data(map[string]string{"session": `"s*"`}),
	"bad tool":                data(map[string]string{"tool": `"a..b"`}),
	"tool with wildcard":      data(map[string]string{"tool": `"exec.>"`}),
	"fractional attempt":      data(map[string]string{"attempt": `1.5`}),
	"unknown error code":      data(map[string]string{"error": `{"code":"oops","message":"m"}`}),
	"error without code":      data(map[string]string{"error": `{"message":"m"}`}),
	"error message as number": data(map[string]string{"error": `{"code":"timeout","message":1}`}),
	"error as string":         data(map[string]string{"error": `"timeout"`}),
	"parent bad run id":       data(map[string]string{"parent": `{"run_id":"r 1","call_id":"c"}`}),
	"parent missing run id":   data(map[string]string{"parent": `{"call_id":"c"}`}),
	"parent bad tool":         data(map[string]string{"parent": `{"run_id":"r","call_id":"c","tool":"x.*"}`}),
	"meta value a number":     data(map[string]string{"meta": `{"k":1}`}),
}

func mustMarshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// requireInvalidInput checks the decoder's error contract.
func requireInvalidInput(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var ce *contracts.Error
	require.ErrorAs(t, err, &ce, "error %v (%T) is not a *contracts.Error", err, err)
	require.Equal(t, contracts.CodeInvalidInput, ce.Code)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

// TestSchemaAndDecoderAgree is a differential check: a document is accepted
// by the schema exactly when the Go decoder accepts it.
func TestSchemaAndDecoderAgree(t *testing.T) {
	t.Parallel()
	s := compileSchemas(t)
	type kind struct {
		sch    *jsonschema.Schema
		decode func([]byte) error
	}
	job := kind{s.job, func(b []byte) error { _, err := contracts.DecodeJob(b); return err }}
	event := kind{s.event, func(b []byte) error { _, err := contracts.DecodeEvent(b); return err }}
	for _, tc := range []struct {
		name  string
		k     kind
		docs  map[string]string
		valid bool
	}{
		{"job/valid", job, validJobs, true},
		{"job/invalid", job, invalidJobs, false},
		{"event/valid", event, validEvents, true},
		{"event/invalid", event, invalidEvents, false},
	} {
		for name, doc := range tc.docs {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				serr := validate(tc.k.sch, []byte(doc))
				derr := tc.k.decode([]byte(doc))
				if tc.valid {
					require.NoError(t, serr, "schema rejects %s", doc)
					require.NoError(t, derr, "decoder rejects %s", doc)
					return
				}
				require.Error(t, serr, "schema accepts %s", doc)
				requireInvalidInput(t, derr)
			})
		}
	}
}

// TestSchemaAndDecoderKnownDifferences pins the few places where the schema
// cannot say what the Go decoder does. If one of these starts to agree, move
// it to the tables above.
func TestSchemaAndDecoderKnownDifferences(t *testing.T) {
	t.Parallel()
	s := compileSchemas(t)
	multi := strings.Repeat("é", 200) // 200 characters, 400 bytes
	for _, tc := range []struct {
		name               string
		event              bool
		doc                string
		schemaOK, decodeOK bool
	}{
		// encoding/json refuses a fraction or exponent for an integer field;
		// JSON Schema's integer is a mathematical one.
		{"integer with fraction", false, obj(minJob, map[string]string{"timeout_ms": `1000.0`}), true, false},
		{"integer with exponent", false, obj(minJob, map[string]string{"max_attempts": `1e1`}), true, false},
		// Meta lengths are bytes in Go; maxLength counts characters.
		{"meta value of 400 bytes", false, obj(minJob, map[string]string{"meta": `{"k":` + q(multi) + `}`}), true, false},
		// encoding/json matches field names case-insensitively.
		{"upper-case key", false, `{"ID":"j1","tool":"exec","session":"s1"}`, false, true},
		{"mixed-case key overrides", false, `{"id":"j1","tool":"exec","session":"s1","Id":"a b"}`, true, false},
		// encoding/json decodes null into a string map value as "".
		{"null meta value", false, obj(minJob, map[string]string{"meta": `{"k":null}`}), false, true},
		// A negative attempt is never written; the decoder does not check it.
		{"negative attempt", true, data(map[string]string{"attempt": `-1`}), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sch, decode := s.job, func(b []byte) error { _, err := contracts.DecodeJob(b); return err }
			if tc.event {
				sch, decode = s.event, func(b []byte) error { _, err := contracts.DecodeEvent(b); return err }
			}
			serr, derr := validate(sch, []byte(tc.doc)), decode([]byte(tc.doc))
			require.Equal(t, tc.schemaOK, serr == nil, "schema on %s: %v", tc.doc, serr)
			require.Equal(t, tc.decodeOK, derr == nil, "decoder on %s: %v", tc.doc, derr)
			if derr != nil {
				requireInvalidInput(t, derr)
			}
		})
	}
}
