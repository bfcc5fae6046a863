# syntax=docker/dockerfile:1
# Two images from one build recipe. The build steps are the ones CI runs (`make deps`, `make install`),
# so CI exercises them even though no Docker engine runs there.
#   docker build --target operator -t ringmaster/operator:latest .
#   docker build --target worker   -t ringmaster/worker:latest .

# ---- operator: build on Debian, run on Debian slim ----------------------------------------------
FROM debian:12 AS build-operator
RUN apt-get update && apt-get install -y --no-install-recommends make sudo ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make deps && make CUDA=0 install PREFIX=/usr/local DESTDIR=/out

FROM debian:12-slim AS operator
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4 libcjson1 libmicrohttpd12 libyaml-0-2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-operator /out/usr/local/bin/ringmaster /usr/local/bin/ringmaster
USER 65532:65532
EXPOSE 8080 8081 29400
ENTRYPOINT ["ringmaster", "operator"]

# ---- worker: CUDA devel to build (nvcc + NCCL), CUDA runtime to run ------------------------------
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build-worker
RUN apt-get update && apt-get install -y --no-install-recommends make sudo ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make deps && make CUDA=1 install PREFIX=/usr/local DESTDIR=/out

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04 AS worker
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4t64 libcjson1 libmicrohttpd12t64 \
      libyaml-0-2 libopenblas0-pthread libopenmpi3t64 openmpi-bin dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-worker /out/usr/local/bin/ringmaster-worker /usr/local/bin/ringmaster-worker
RUN useradd --uid 65532 --create-home worker
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["ringmaster-worker"]
CMD ["train"]
