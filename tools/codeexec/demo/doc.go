// Package demo is a local stand-in for xAI's Responses API, so that the
// code_execution tool can be tried end to end without a provider key.
//
// # What it is
//
// A Server listens on 127.0.0.1 (a random port by default) and answers
// POST /v1/responses the way xAI's API does: it checks the method, the
// path, the bearer key, the content type and the JSON body, refuses bad
// requests with 4xx and an error body of xAI's shape, and answers a good one
// with a Responses body carrying a code_interpreter_call and a message. The
// code_execution tool's real xai client talks to it through
// ProviderConfig.BaseURL and APIKey; nothing in the client is bypassed.
//
// # What it is not
//
// No model is called. Every answer is canned: the task is printed back by
// a one-line Python program the server did not run, and the message starts
// with Label ("demo provider: no model was called"). Usage is zero tokens
// and zero cost. `toolq dev --demo-provider` starts one inside the dev
// process; nothing else does.
package demo
