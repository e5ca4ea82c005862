// Package provider holds the types the code-execution wire clients share:
// the Client interface, the normalized Request and Response, and Error with
// its Kind, which decides retries (Retryable), breaker accounting (Fault)
// and failover.
package provider
