package tracing

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/toolq/toolq/contracts"
)

// writerUnsupported are the exporter variables the OTLP/HTTP writer does
// not implement: with any of them set, the SDK's exporter sends instead.
var writerUnsupported = []string{
	"CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE", "COMPRESSION", "TIMEOUT",
}

// newSink makes the exporter of cfg: the OTLP/HTTP writer when it can
// serve cfg, else the SDK's exporter.
func newSink(ctx context.Context, cfg *Config, res *resource.Resource) (sink, error) {
	proto, err := protocol(cfg)
	if err != nil {
		return nil, err
	}
	if proto == ProtocolHTTP && writerServes() {
		return newHTTPSink(cfg, res)
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &sdkSink{t: &Tracer{res: res}, exp: exp}, nil
}

func writerServes() bool {
	for _, v := range writerUnsupported {
		if os.Getenv("OTEL_EXPORTER_OTLP_"+v) != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_"+v) != "" {
			return false
		}
	}
	return true
}

// httpSink posts each batch as one OTLP/HTTP protobuf request, written
// straight from the records (no intermediate protobuf structs).
type httpSink struct {
	url     string
	headers http.Header
	client  *http.Client
	head    []byte // the resource, field 1 of ResourceSpans
	scope   []byte // the scope, field 1 of ScopeSpans
	schema  string
	spans   []byte
	body    []byte
}

func newHTTPSink(cfg *Config, res *resource.Resource) (*httpSink, error) {
	var target string
	switch {
	case cfg.Endpoint != "":
		u, err := endpointURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		target = u.String()
	case os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		target = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	default:
		// The base endpoint gets the signal's path, as the specification
		// says.
		target = strings.TrimSuffix(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	}
	if u, err := url.Parse(target); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "OTLP endpoint %q: want http(s)://host:port[/path]", target)
	}
	h := http.Header{}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := parseHeaders(h, os.Getenv(v)); err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "%s: %v", v, err)
		}
	}
	h.Set("Content-Type", "application/x-protobuf")
	var resAttrs []byte
	for _, kv := range res.Attributes() {
		resAttrs = appendKeyValue(resAttrs, 1, string(kv.Key), valueOf(kv.Value))
	}
	s := &httpSink{
		url: target, headers: h, schema: res.SchemaURL(),
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	}
	s.head = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), resAttrs)
	scope := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), scopeName)
	s.scope = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), scope)
	return s, nil
}

// parseHeaders adds the W3C-baggage-like list the OTLP variables hold
// (key=value,key2=value2, values percent-encoded) to h.
func parseHeaders(h http.Header, s string) error {
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("header %q: want key=value", part)
		}
		v, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("header %q: %w", k, err)
		}
		h.Set(k, v)
	}
	return nil
}

func (s *httpSink) export(ctx context.Context, recs []*record) error {
	s.body = s.request(s.body[:0], recs)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(s.body))
	if err != nil {
		return fmt.Errorf("tracing: export: %w", err)
	}
	req.Header = s.headers.Clone()
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("tracing: export: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("tracing: export: collector answered %s", resp.Status)
	}
	return nil
}

func (s *httpSink) shutdown(context.Context) error {
	s.client.CloseIdleConnections()
	return nil
}

// request appends an ExportTraceServiceRequest of recs to b: one
// ResourceSpans (the process's resource) of one ScopeSpans.
func (s *httpSink) request(b []byte, recs []*record) []byte {
	s.spans = s.spans[:0]
	for _, r := range recs {
		s.spans = appendSpan(s.spans, r)
	}
	scopeSpans := len(s.scope) + len(s.spans)
	rs := len(s.head) + 1 + protowire.SizeBytes(scopeSpans)
	if s.schema != "" {
		rs += 1 + protowire.SizeBytes(len(s.schema))
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = appendLen(b, rs)
	b = append(b, s.head...)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = appendLen(b, scopeSpans)
	b = append(b, s.scope...)
	b = append(b, s.spans...)
	if s.schema != "" {
		b = protowire.AppendString(protowire.AppendTag(b, 3, protowire.BytesType), s.schema)
	}
	return b
}

// OTLP's span kinds, status code and span flags.
const (
	kindInternal      = 1
	kindConsumer      = 5
	statusError       = 2
	flagHasIsRemote   = 0x100
	flagIsRemote      = 0x200
	spanFieldInScope  = 2
	spanFieldNumAttrs = 9
)

// appendSpan appends r as field 2 (spans) of ScopeSpans: a Span message
// as the SDK's OTLP exporter fills it.
func appendSpan(b []byte, r *record) []byte {
	n := spanSize(r)
	b = protowire.AppendTag(b, spanFieldInScope, protowire.BytesType)
	b = appendLen(b, n)
	b = appendID(b, 1, r.tid[:])
	b = appendID(b, 2, r.sid[:])
	if r.parent.IsValid() {
		b = appendID(b, 4, r.parent[:])
	}
	b = protowire.AppendString(protowire.AppendTag(b, 5, protowire.BytesType), r.name)
	kind := uint64(kindInternal)
	if r.consumer {
		kind = kindConsumer
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, 6, protowire.VarintType), kind)
	b = protowire.AppendFixed64(protowire.AppendTag(b, 7, protowire.Fixed64Type), uint64(max(r.start, 0))) //nolint:gosec // G115: not negative
	b = protowire.AppendFixed64(protowire.AppendTag(b, 8, protowire.Fixed64Type), uint64(max(r.end, 0)))   //nolint:gosec // G115: not negative
	for i := range r.attrs {
		if a, ok := attrAt(r.attrs, i); ok {
			b = appendKeyValue(b, spanFieldNumAttrs, a.Key, slogValue(a.Value))
		}
	}
	for _, l := range r.links {
		tid, sid := l.TraceID(), l.SpanID()
		b = protowire.AppendTag(b, 13, protowire.BytesType)
		b = appendLen(b, linkSize)
		b = appendID(b, 1, tid[:])
		b = appendID(b, 2, sid[:])
		b = protowire.AppendFixed32(protowire.AppendTag(b, 6, protowire.Fixed32Type), uint32(l.TraceFlags())|flagHasIsRemote|flagIsRemote)
	}
	b = protowire.AppendTag(b, 15, protowire.BytesType)
	b = appendLen(b, statusSize(r))
	if r.errorCode != "" {
		b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), r.errorCode)
		b = protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), statusError)
	}
	flags := uint32(r.flags) | flagHasIsRemote
	if r.remote {
		flags |= flagIsRemote
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, 16, protowire.Fixed32Type), flags)
}

// linkSize is a Link's size: trace id, span id and flags.
const linkSize = 2 + 16 + 2 + 8 + 1 + 4

func statusSize(r *record) int {
	if r.errorCode == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(r.errorCode)) + 2
}

func spanSize(r *record) int {
	n := 2 + 16 + 2 + 8 // trace and span ids
	if r.parent.IsValid() {
		n += 2 + 8
	}
	n += 1 + protowire.SizeBytes(len(r.name)) + 2 + 9 + 9 // name, kind, start, end
	for i := range r.attrs {
		if a, ok := attrAt(r.attrs, i); ok {
			n += 1 + protowire.SizeBytes(keyValueSize(a.Key, slogValue(a.Value)))
		}
	}
	n += len(r.links) * (1 + protowire.SizeBytes(linkSize))
	n += 1 + protowire.SizeBytes(statusSize(r))
	return n + 2 + 4 // flags
}

// appendLen appends a length prefix.
func appendLen(b []byte, n int) []byte {
	return protowire.AppendVarint(b, uint64(n)) //nolint:gosec // G115: a length, not negative
}

func appendID(b []byte, field protowire.Number, id []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, field, protowire.BytesType), id)
}

// value is an attribute's value as OTLP's AnyValue holds it.
type value struct {
	kind slog.Kind // KindString, KindBool, KindInt64 or KindFloat64
	s    string
	n    uint64 // int64 bits, bool 0/1, or float64 bits
}

// slogValue maps v as appendAttrs does.
func slogValue(v slog.Value) value {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return value{kind: slog.KindString, s: v.String()}
	case slog.KindInt64:
		return value{kind: slog.KindInt64, n: uint64(v.Int64())} //nolint:gosec // G115: the bits
	case slog.KindUint64:
		return value{kind: slog.KindInt64, n: min(v.Uint64(), math.MaxInt64)}
	case slog.KindFloat64:
		return value{kind: slog.KindFloat64, n: math.Float64bits(v.Float64())}
	case slog.KindBool:
		if v.Bool() {
			return value{kind: slog.KindBool, n: 1}
		}
		return value{kind: slog.KindBool}
	case slog.KindDuration:
		return value{kind: slog.KindFloat64, n: math.Float64bits(float64(v.Duration().Microseconds()) / 1000)}
	}
	return value{kind: slog.KindString, s: v.String()}
}

// valueOf maps a resource attribute's value; slices go as their text.
func valueOf(v attribute.Value) value {
	switch v.Type() {
	case attribute.BOOL:
		return slogValue(slog.BoolValue(v.AsBool()))
	case attribute.INT64:
		return slogValue(slog.Int64Value(v.AsInt64()))
	case attribute.FLOAT64:
		return slogValue(slog.Float64Value(v.AsFloat64()))
	}
	return value{kind: slog.KindString, s: v.String()}
}

func anyValueSize(v value) int {
	switch v.kind {
	case slog.KindBool:
		return 2
	case slog.KindInt64:
		return 1 + protowire.SizeVarint(v.n)
	case slog.KindFloat64:
		return 9
	}
	return 1 + protowire.SizeBytes(len(v.s))
}

func keyValueSize(key string, v value) int {
	return 1 + protowire.SizeBytes(len(key)) + 1 + protowire.SizeBytes(anyValueSize(v))
}

// appendKeyValue appends a KeyValue as field.
func appendKeyValue(b []byte, field protowire.Number, key string, v value) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = appendLen(b, keyValueSize(key, v))
	b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = appendLen(b, anyValueSize(v))
	switch v.kind {
	case slog.KindBool:
		return protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), v.n)
	case slog.KindInt64:
		return protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), v.n)
	case slog.KindFloat64:
		return protowire.AppendFixed64(protowire.AppendTag(b, 4, protowire.Fixed64Type), v.n)
	}
	return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), v.s)
}
