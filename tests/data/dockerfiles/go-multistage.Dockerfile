# syntax=docker/dockerfile:1.7
# A Go service built in one stage and copied into a small runtime image.
ARG GO_VERSION=1.22
ARG ALPINE_VERSION=3.19

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-alpine${ALPINE_VERSION} AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
ENV CGO_ENABLED=0 \
    GOFLAGS="-trimpath -mod=readonly"
# Dependencies first, so the module cache layer survives source edits.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download -x
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
      go build -ldflags="-s -w -X main.version=${VERSION:-dev}" -o /out/server ./cmd/server

FROM build AS test
RUN --mount=type=cache,target=/root/.cache/go-build go test ./...

FROM alpine:${ALPINE_VERSION} AS runtime
RUN apk add --no-cache ca-certificates tzdata \
 && addgroup -S app && adduser -S -G app app
COPY --from=build --chown=app:app --chmod=0755 /out/server /usr/local/bin/server
USER app:app
EXPOSE 8080/tcp
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
  CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/server"]
CMD ["--listen", ":8080"]
