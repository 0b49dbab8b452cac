# The cloud-controller-manager image: a static binary on a distroless base
# that runs as a non-root user.
#   docker build -t <name>:<tag> --build-arg VERSION=<tag> .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/ccmkit/ccmkit/app.Version=${VERSION}" \
      -o /out/cloud-controller-manager ./cmd/cloud-controller-manager

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cloud-controller-manager /cloud-controller-manager
USER 65532:65532
ENTRYPOINT ["/cloud-controller-manager"]
