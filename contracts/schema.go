package contracts

import (
	"bytes"
	"embed"
)

//go:embed schema/*.json
var schemaFS embed.FS

var (
	jobSchema   = mustSchema("schema/job.schema.json")
	eventSchema = mustSchema("schema/event.schema.json")
)

func mustSchema(name string) []byte {
	b, err := schemaFS.ReadFile(name)
	if err != nil {
		panic("contracts: embedded schema missing: " + name)
	}
	return b
}

// JobSchema returns the JSON Schema (draft 2020-12) of a job message, the wire
// form of Job. The caller gets its own copy.
func JobSchema() []byte { return bytes.Clone(jobSchema) }

// EventSchema returns the JSON Schema (draft 2020-12) of an event message,
// the wire form of Event with its EventData, Error and Parent. The caller gets
// its own copy.
func EventSchema() []byte { return bytes.Clone(eventSchema) }
