# The kerf image: one binary, two commands (`kerf webhook`, `kerf controller`), run as a non-root user.
# The binary links only glibc (aws-lc and mimalloc are built in), so the distroless "cc" base suffices.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kerf-cmd --bin kerf

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kerf /usr/local/bin/kerf
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kerf"]
