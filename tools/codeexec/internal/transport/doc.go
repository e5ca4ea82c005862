// Package transport is the HTTP exchange every provider client shares: one
// JSON POST, its status classified into a provider.Error, Retry-After read,
// and the bodies logged at debug level with secrets redacted.
package transport
