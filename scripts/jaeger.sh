#!/usr/bin/env bash
# Builds the Jaeger v2 all-in-one binary from the Go module proxy, once, into the cache; prints its path.
#
# Jaeger v2 ships in the Go module github.com/jaegertracing/jaeger under v1.x module versions
# (v1.76.0 is Jaeger v2.13.0). Its go.mod has replace directives, which `go install module@version`
# refuses, so the module is downloaded into the module cache and installed from there as the main module.
set -euo pipefail

MODULE=github.com/jaegertracing/jaeger
VERSION=v1.76.0 # Jaeger v2.13.0
CACHE="${RUNTIME_CACHE_DIR:-$HOME/.cache/kafka-actor-runtime}/jaeger-$VERSION"
BINARY="$CACHE/jaeger"

# --if-built: print the path only if the binary is there already (exit 1 otherwise), build nothing.
if [[ "${1:-}" == "--if-built" ]]; then
    [[ -x "$BINARY" ]] && echo "$BINARY"
    exit $?
fi
if [[ ! -x "$BINARY" ]]; then
    command -v go >/dev/null || { echo "jaeger.sh: Go is needed to build Jaeger" >&2; exit 1; }
    echo "building Jaeger $VERSION into $CACHE (about 10 minutes the first time)" >&2
    source_dir=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [[ -d "$source_dir" ]] || { echo "jaeger.sh: could not download $MODULE@$VERSION" >&2; exit 1; }
    mkdir -p "$CACHE"
    (cd "$source_dir" && GOBIN="$CACHE" GOFLAGS=-buildvcs=false go install -trimpath ./cmd/jaeger)
fi
echo "$BINARY"
