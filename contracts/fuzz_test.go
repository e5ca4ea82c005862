package contracts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolq/toolq/contracts"
)

// sameJSON reports whether a and b are the same JSON value (or both absent).
// Raw fields are compared by value: re-encoding compacts them and escapes
// HTML characters, which changes their bytes but not their meaning.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func sameMeta(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sameParent(a, b *contracts.Parent) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameError(a, b *contracts.Error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Code == b.Code && a.Message == b.Message && a.Retryable == b.Retryable && sameJSON(a.Details, b.Details)
}

func sameJob(a, b *contracts.Job) bool {
	return a.ID == b.ID && a.Tool == b.Tool && a.Session == b.Session && sameJSON(a.Input, b.Input) &&
		sameParent(a.Parent, b.Parent) && a.TimeoutMs == b.TimeoutMs && a.MaxAttempts == b.MaxAttempts &&
		a.Progress == b.Progress && a.CreatedAt.Equal(b.CreatedAt) && a.CreatedAt.Format(timeLayout) == b.CreatedAt.Format(timeLayout) &&
		sameMeta(a.Meta, b.Meta)
}

func sameEvent(a, b *contracts.Event) bool {
	da, db := a.Data, b.Data
	return a.SpecVersion == b.SpecVersion && a.Type == b.Type && a.Source == b.Source && a.ID == b.ID &&
		a.Subject == b.Subject && a.Time.Equal(b.Time) && a.Time.Format(timeLayout) == b.Time.Format(timeLayout) &&
		a.DataContentType == b.DataContentType &&
		da.JobID == db.JobID && da.Session == db.Session && da.Tool == db.Tool && da.Status == db.Status &&
		da.Attempt == db.Attempt && sameJSON(da.Result, db.Result) && sameError(da.Error, db.Error) &&
		sameParent(da.Parent, db.Parent) && sameMeta(da.Meta, db.Meta)
}

// timeLayout keeps the offset, which Equal ignores.
const timeLayout = "2006-01-02T15:04:05.999999999Z07:00"

func requireFuzzInvalidInput(t *testing.T, data []byte, err error) {
	t.Helper()
	var ce *contracts.Error
	if !errors.As(err, &ce) || ce.Code != contracts.CodeInvalidInput || !errors.Is(err, contracts.ErrInvalidInput) {
		t.Fatalf("error for %q is %v (%T), want a *contracts.Error with code invalid_input", data, err, err)
	}
}

func FuzzDecodeJob(f *testing.F) {
	for _, doc := range validJobs {
		f.Add([]byte(doc))
	}
	for _, doc := range invalidJobs {
		f.Add([]byte(doc))
	}
	f.Add([]byte(`{"id":"j","tool":"t","session":"s","input":"<&>\u2028","meta":{"\u00e9":"\ud800"}}`))
	f.Add([]byte(`{"id":"j","tool":"t","session":"s","created_at":"0000-01-01T00:00:00+23:59"}`))
	f.Add([]byte(`{"id":"j","ID":"k","tool":"t","session":"s","meta":{"a":null},"parent":{"run_id":"r","call_id":"c"},"parent":{"call_id":"d"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := contracts.DecodeJob(data)
		if err != nil {
			if j != nil {
				t.Fatalf("DecodeJob returned a job and an error for %q", data)
			}
			requireFuzzInvalidInput(t, data, err)
			return
		}
		// Whatever is accepted is exactly one JSON document (no trailing
		// bytes, no non-JSON whitespace).
		if !json.Valid(data) {
			t.Fatalf("accepted a body that is not one JSON value: %q", data)
		}
		if !contracts.ValidID(j.ID) || !contracts.ValidID(j.Session) || !contracts.ValidTool(j.Tool) {
			t.Fatalf("accepted invalid ids %q %q %q from %q", j.ID, j.Session, j.Tool, data)
		}
		if j.Parent != nil && (!contracts.ValidID(j.Parent.RunID) || !contracts.ValidID(j.Parent.CallID)) {
			t.Fatalf("accepted invalid parent %+v from %q", *j.Parent, data)
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("decoded job does not validate: %v", err)
		}
		enc, err := json.Marshal(j)
		if err != nil {
			t.Fatalf("accepted job does not encode: %v (from %q)", err, data)
		}
		back, err := contracts.DecodeJob(enc)
		if err != nil {
			t.Fatalf("re-encoded job %s is rejected: %v (from %q)", enc, err, data)
		}
		if !sameJob(j, back) {
			t.Fatalf("round trip changed the job:\n%+v\n%+v\n(from %q via %s)", j, back, data, enc)
		}
		// A second round trip is byte-stable.
		enc2, err := json.Marshal(back)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %s vs %s (%v)", enc, enc2, err)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	for _, doc := range validEvents {
		f.Add([]byte(doc))
	}
	for _, doc := range invalidEvents {
		f.Add([]byte(doc))
	}
	f.Add([]byte(mustMarshal(contracts.NewEvent("/w", fullJob(), contracts.StatusRunning, 3, fullJob().CreatedAt))))
	f.Add([]byte(data(map[string]string{"error": `{"code":"timeout","details":"<\u00e9>","retryable":null}`, "result": `[1e400]`})))
	f.Add([]byte(data(map[string]string{"attempt": `-9223372036854775808`})))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := contracts.DecodeEvent(data)
		if err != nil {
			if e != nil {
				t.Fatalf("DecodeEvent returned an event and an error for %q", data)
			}
			requireFuzzInvalidInput(t, data, err)
			return
		}
		// Whatever is accepted is exactly one JSON document (no trailing
		// bytes, no non-JSON whitespace).
		if !json.Valid(data) {
			t.Fatalf("accepted a body that is not one JSON value: %q", data)
		}
		d := e.Data
		if !contracts.ValidID(d.JobID) || !contracts.ValidID(d.Session) || (d.Tool != "" && !contracts.ValidTool(d.Tool)) {
			t.Fatalf("accepted invalid ids %q %q %q from %q", d.JobID, d.Session, d.Tool, data)
		}
		if d.Parent != nil && (!contracts.ValidID(d.Parent.RunID) || !contracts.ValidID(d.Parent.CallID)) {
			t.Fatalf("accepted invalid parent %+v from %q", *d.Parent, data)
		}
		if !d.Status.Valid() || e.Type != contracts.EventTypePrefix+string(d.Status) || (d.Error != nil && !d.Error.Code.Valid()) {
			t.Fatalf("accepted an inconsistent event from %q", data)
		}
		enc, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("accepted event does not encode: %v (from %q)", err, data)
		}
		back, err := contracts.DecodeEvent(enc)
		if err != nil {
			t.Fatalf("re-encoded event %s is rejected: %v (from %q)", enc, err, data)
		}
		if !sameEvent(e, back) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v\n(from %q via %s)", e, back, data, enc)
		}
		enc2, err := json.Marshal(back)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %s vs %s (%v)", enc, enc2, err)
		}
	})
}

// FuzzDecodeReplayRequest: a tenant's replay request body is read without
// panicking; what is accepted names a valid job id or none and encodes
// back to a request that decodes the same; what is refused is
// invalid_input.
func FuzzDecodeReplayRequest(f *testing.F) {
	for _, doc := range []string{
		``, `{}`, `{"jobId":"j1"}`, `{"since":"2026-12-06T23:40:00.123456789Z"}`,
		`{"jobId":"j1","since":"2026-12-06T23:40:00Z","later":true}`,
		`{"jobId":"a b"}`, `{"since":"yesterday"}`, `[]`, `null`, `{"jobId":1}`, `{} {}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := contracts.DecodeReplayRequest(data)
		if err != nil {
			if r != nil {
				t.Fatalf("DecodeReplayRequest returned a request and an error for %q", data)
			}
			requireFuzzInvalidInput(t, data, err)
			return
		}
		if r.JobID != "" && !contracts.ValidID(r.JobID) {
			t.Fatalf("accepted invalid job id %q from %q", r.JobID, data)
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("accepted request does not encode: %v (from %q)", err, data)
		}
		back, err := contracts.DecodeReplayRequest(enc)
		if err != nil {
			t.Fatalf("re-encoded request %s is rejected: %v (from %q)", enc, err, data)
		}
		if back.JobID != r.JobID || !back.Since.Equal(r.Since) {
			t.Fatalf("round trip changed the request: %+v vs %+v (from %q via %s)", r, back, data, enc)
		}
	})
}
