// Package otlptest is an OTLP/HTTP trace receiver on the loopback
// interface: it decodes each export request as a collector would and keeps
// the spans (or only counts them), for tests and for `toolq bench`, whose
// traced rounds export to it.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span with the service.name of its resource.
type Span struct {
	Service string
	Span    *tracepb.Span
}

// Receiver is a running OTLP/HTTP (or OTLP/gRPC) receiver.
type Receiver struct {
	srv     *httptest.Server
	grpc    *grpc.Server
	addr    string // the gRPC listener's
	keep    bool
	discard bool

	mu       sync.Mutex
	spans    []Span
	count    int
	requests int
	bad      int
}

// New starts a receiver on 127.0.0.1; keep says whether it keeps the spans
// (Spans) or only counts them (Count). Close stops it.
func New(keep bool) *Receiver {
	r := &Receiver{keep: keep}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// NewDiscard starts a receiver that reads each request and answers it
// without decoding it, as a collector on another machine costs this one
// nothing but the export: for measuring what tracing costs its sender.
func NewDiscard() *Receiver {
	r := &Receiver{discard: true}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// NewGRPC starts an OTLP/gRPC receiver on 127.0.0.1 (no TLS) that keeps
// the spans.
func NewGRPC() (*Receiver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{keep: true, grpc: grpc.NewServer(), addr: lis.Addr().String()}
	collectortrace.RegisterTraceServiceServer(r.grpc, traceService{r: r})
	go func() { _ = r.grpc.Serve(lis) }()
	return r, nil
}

type traceService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// URL is the receiver's base URL (the OTLP/HTTP exporter appends
// /v1/traces; for gRPC, http:// says no TLS).
func (r *Receiver) URL() string {
	if r.grpc != nil {
		return "http://" + r.addr
	}
	return r.srv.URL
}

// Close stops the receiver.
func (r *Receiver) Close() {
	if r.grpc != nil {
		r.grpc.Stop()
		return
	}
	r.srv.Close()
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.fail()
		http.Error(w, "want POST /v1/traces of application/x-protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	if r.discard {
		// Read through a small buffer and dropped: nothing of a request
		// is kept, so it costs its sender's process no heap.
		if _, err := io.Copy(io.Discard, io.LimitReader(body, 64<<20)); err != nil {
			r.fail()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	}
	data, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		r.fail()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &msg); err != nil {
		r.fail()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// add keeps (or counts) the spans of one export request.
func (r *Receiver) add(msg *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	r.requests++
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.count += len(ss.GetSpans())
			if r.keep {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, Span{Service: service, Span: s})
				}
			}
		}
	}
	r.mu.Unlock()
}

func (r *Receiver) fail() {
	r.mu.Lock()
	r.bad++
	r.mu.Unlock()
}

// Spans returns the spans received so far (none unless keep).
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count is the number of spans received so far.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Requests is the number of export requests answered.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Bad is the number of requests refused (not OTLP/HTTP protobuf).
func (r *Receiver) Bad() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

// Attr returns the string value of attribute key of s, "" when absent.
func Attr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}
