# The flash-sale service, for docker-compose. The benchmark itself runs on the host.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p app --bin seckill-app

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/seckill-app /usr/local/bin/seckill-app
EXPOSE 8080
ENTRYPOINT ["seckill-app"]
