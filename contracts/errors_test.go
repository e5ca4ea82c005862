package contracts_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

var sentinels = map[contracts.ErrorCode]*contracts.Error{
	contracts.CodeInvalidInput:          contracts.ErrInvalidInput,
	contracts.CodeRuntimeUnavailable:    contracts.ErrRuntimeUnavailable,
	contracts.CodeTimeout:               contracts.ErrTimeout,
	contracts.CodeOutputLimitExceeded:   contracts.ErrOutputLimitExceeded,
	contracts.CodeSnapshotLimitExceeded: contracts.ErrSnapshotLimitExceeded,
	contracts.CodeInternalError:         contracts.ErrInternal,
	contracts.CodeCancelled:             contracts.ErrCancelled,
	contracts.CodeProviderUnavailable:   contracts.ErrProviderUnavailable,
	contracts.CodeProviderError:         contracts.ErrProviderError,
	contracts.CodeMissingCredentials:    contracts.ErrMissingCredentials,
	contracts.CodeDenied:                contracts.ErrDenied,
	contracts.CodeGuestError:            contracts.ErrGuestError,
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	require.Len(t, sentinels, len(contracts.ErrorCodes))
	seen := map[contracts.ErrorCode]bool{}
	for _, c := range contracts.ErrorCodes {
		require.True(t, c.Valid(), c)
		require.False(t, seen[c], "duplicate %s", c)
		seen[c] = true
		require.Equal(t, c, sentinels[c].Code)
	}
	for _, c := range []contracts.ErrorCode{"", "Timeout", "timeout ", "unknown", "ok"} {
		require.False(t, c.Valid(), "%q", c)
	}
}

func TestErrorIsThroughWrapping(t *testing.T) {
	t.Parallel()
	for code, sentinel := range sentinels {
		err := contracts.Errorf(code, "boom %d", 42)
		require.EqualError(t, err, string(code)+": boom 42")
		wrapped := fmt.Errorf("worker: run job j1: %w", err)
		twice := fmt.Errorf("outer: %w", wrapped)
		joined := errors.Join(io.EOF, twice)
		for _, e := range []error{err, wrapped, twice, joined} {
			require.ErrorIs(t, e, sentinel, "%v", e)
			for other, os := range sentinels {
				if other != code {
					require.NotErrorIs(t, e, os, "%v is not %s", e, other)
				}
			}
		}
		// The match is by code, whatever the message or other fields.
		require.ErrorIs(t, sentinel, &contracts.Error{Code: code, Message: "other", Retryable: true})
		require.ErrorIs(t, err, fmt.Errorf("a wrapped target: %w", sentinel))
	}
	require.NotErrorIs(t, io.EOF, contracts.ErrTimeout)
	require.NotErrorIs(t, contracts.ErrTimeout, context.DeadlineExceeded)
	require.NotErrorIs(t, contracts.ErrTimeout, io.EOF)
}

func TestErrorString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "timeout", contracts.ErrTimeout.Error())
	require.Equal(t, "denied: not on the allowlist", contracts.Errorf(contracts.CodeDenied, "not on the allowlist").Error())
}

func TestAsError(t *testing.T) {
	t.Parallel()
	ce := contracts.Errorf(contracts.CodeProviderError, "429")
	for _, tc := range []struct {
		name string
		err  error
		want *contracts.Error
	}{
		{"nil", nil, nil},
		{"an *Error as is", ce, ce},
		{"wrapped", fmt.Errorf("call: %w", ce), ce},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", ce)), ce},
		{"joined", errors.Join(io.EOF, ce), ce},
		{"plain", io.EOF, &contracts.Error{Code: contracts.CodeInternalError, Message: "EOF"}},
		{"wrapped plain", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), &contracts.Error{Code: contracts.CodeInternalError, Message: "read: unexpected EOF"}},
		{"context deadline", context.DeadlineExceeded, &contracts.Error{Code: contracts.CodeInternalError, Message: "context deadline exceeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := contracts.AsError(tc.err)
			if tc.want == nil {
				require.Nil(t, got)
				return
			}
			require.Equal(t, tc.want, got)
			if tc.want == ce {
				require.Same(t, ce, got, "the *Error in the chain is returned, not a copy")
			}
		})
	}
}

func TestErrorWireForm(t *testing.T) {
	t.Parallel()
	e := &contracts.Error{Code: contracts.CodeMissingCredentials, Message: "set XAI_API_KEY", Details: json.RawMessage(`{"env":["XAI_API_KEY"]}`)}
	b, err := json.Marshal(e)
	require.NoError(t, err)
	require.JSONEq(t, `{"code":"missing_credentials","message":"set XAI_API_KEY","details":{"env":["XAI_API_KEY"]}}`, string(b))
	var back contracts.Error
	require.NoError(t, json.Unmarshal(b, &back))
	require.ErrorIs(t, &back, contracts.ErrMissingCredentials)
	require.False(t, back.Retryable)
}
