#!/usr/bin/env bash
# Fetches the QuickJS-NG WASI reactor used by the sandbox package:
# quickjs.wasm from the npm package quickjs-wasi, pinned and sha256-verified.
# The file is not committed; `make wasm` runs this script.
set -euo pipefail

VERSION="3.7.0"
TGZ_SHA256="bf1cc7779f8ba05e7d77bba96464c78b3121197fd15e2ff8c00c15f2a3f26036"
WASM_SHA256="c0bd8f296e18cf074969f6401b9ecb72609a1323818ec2b9bf7a8f8d740d1363"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${root}/sandbox/internal/engine/wasm"

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{print $1}'
	else
		shasum -a 256 "$1" | awk '{print $1}'
	fi
}

if [[ -f "${dest}/quickjs.wasm" && "$(sha256 "${dest}/quickjs.wasm")" == "${WASM_SHA256}" ]]; then
	echo "quickjs.wasm ${VERSION} already present"
	exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "npm is required to fetch quickjs-wasi@${VERSION}" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

(cd "${tmp}" && npm pack --silent "quickjs-wasi@${VERSION}" >/dev/null)
tgz="${tmp}/quickjs-wasi-${VERSION}.tgz"
got="$(sha256 "${tgz}")"
if [[ "${got}" != "${TGZ_SHA256}" ]]; then
	echo "quickjs-wasi-${VERSION}.tgz: sha256 ${got}, want ${TGZ_SHA256}" >&2
	exit 1
fi

tar -xzf "${tgz}" -C "${tmp}" package/quickjs.wasm package/LICENSE
got="$(sha256 "${tmp}/package/quickjs.wasm")"
if [[ "${got}" != "${WASM_SHA256}" ]]; then
	echo "quickjs.wasm: sha256 ${got}, want ${WASM_SHA256}" >&2
	exit 1
fi

mkdir -p "${dest}"
install -m 0644 "${tmp}/package/LICENSE" "${dest}/LICENSE.quickjs-wasi"
install -m 0644 "${tmp}/package/quickjs.wasm" "${dest}/quickjs.wasm.tmp"
mv "${dest}/quickjs.wasm.tmp" "${dest}/quickjs.wasm"
echo "installed quickjs.wasm ${VERSION} (sha256 ${WASM_SHA256})"
