// Package gemini is the wire client of Gemini's server-side code execution:
// POST /v1beta/models/{model}:generateContent with tools [{"codeExecution":{}}]
// and the key in the x-goog-api-key header.
//
// # Response
//
// The write-run-read loop happens inside one call; its record comes back as
// ordinary parts of the first candidate, in the order they happened: text,
// executableCode {language, code}, codeExecutionResult {outcome, output} and
// inlineData images (Matplotlib output). Text parts are joined, with a blank
// line where code ran between them; thought parts are left out. Each executableCode opens a run that
// the next codeExecutionResult completes; outcomes OUTCOME_OK,
// OUTCOME_FAILED, OUTCOME_DEADLINE_EXCEEDED and OUTCOME_UNSPECIFIED map to
// ok, failed, deadline_exceeded and unspecified. Gemini has no turn limit
// parameter; MaxTurns is ignored. The sandbox has no meter of its own: cost
// is tokens (usageMetadata).
package gemini
