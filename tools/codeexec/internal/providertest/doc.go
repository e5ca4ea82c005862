// Package providertest is the shared test suite every code-execution wire
// client passes: the real client against a local HTTP server that speaks the
// provider's wire format. Only tests import it.
package providertest
