# pricewire's container image: the release binary on a distroless base,
# run as a non-root user, with the ports and probes deploy/ uses.
#
#   docker build -t pricewire:0.3.0 .
#   docker run --rm -p 9400:9400 -p 9401:9401 pricewire:0.3.0
#
# tests/it/deploy_image.rs holds this file to the manifests (user, ports,
# entrypoint, image tag) and starts the binary the way this image runs it:
# in an otherwise empty root holding exactly the libraries the final stage
# has, as uid 65532, answering /livez.

# Build stage: the toolchain the workspace declares as its MSRV, on the
# Debian release whose glibc the final stage carries.
FROM rust:1.88-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p pricewire --bin pricewire \
    && strip --strip-debug target/release/pricewire

# Final stage: glibc, libgcc_s and libm (all the binary links), CA
# certificates and tzdata, no shell, no package manager. ":nonroot" runs as
# uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/pricewire /usr/local/bin/pricewire
USER 65532:65532
# 9400: subscribers (SOFH + SBE, or TLS with --tls-cert/--tls-key);
# 9401: /livez /readyz /startupz /metrics.
EXPOSE 9400 9401
ENTRYPOINT ["/usr/local/bin/pricewire"]
CMD ["serve", "--listen", "0.0.0.0:9400", "--ops-listen", "0.0.0.0:9401"]
