# syntax=docker/dockerfile:1
#
# The Poise control plane image: a static binary on distroless, running as
# the unprivileged user 65532. Build with `make image` (IMAGE=repo:tag) or
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/poise-dev/poise:0.1.0 .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
# Modules first, so source edits reuse the download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/controlplane ./cmd/controlplane

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/controlplane /usr/local/bin/controlplane
USER 65532:65532
# xDS (gRPC, ADS) and admin (/healthz /readyz /metrics /debug).
EXPOSE 18000 19000
ENTRYPOINT ["/usr/local/bin/controlplane"]
