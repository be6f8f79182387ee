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
# A demo buyer key, so that the image starts and `seckill-app buyer-token --user alice` mints a
# token to try it with: a public value, not a secret. Set SECKILL_BUYER_KEY to a secret of your
# own for a sale.
ENV SECKILL_BUYER_KEY=seckill-demo-buyer-key
EXPOSE 8080
ENTRYPOINT ["seckill-app"]
