# syntax=docker/dockerfile:1
# The images, from one recipe. Build steps are the repository's own (`make deps-build`, `make install`).
#   make images        builds the CPU images here with podman (scripts/images.sh: Debian base made with
#                      mmdebstrap when missing, `podman --runtime runc build --network host --pull=never`):
#     --target operator     -t ringmaster/operator:latest   (Debian slim, the operator only)
#     --target worker-cpu   -t ringmaster/worker:cpu        (Debian slim, OpenBLAS, Open MPI, Fashion-MNIST)
#   docker build --target worker -t ringmaster/worker:latest .   the CUDA worker, for clusters with GPUs:
#                      its nvidia/cuda base cannot be pulled on the project's machines, so it is not built
#                      here; it uses the same make steps as the CPU stages.
# Every image runs as UID/GID 65532 and works with a read-only root filesystem: the operator writes
# nothing; the worker writes only its checkpoint folder and /tmp (emptyDir volumes in the pod spec).

# ---- CPU build: Debian, the same make steps as CI -----------------------------------------------
FROM debian:12 AS build-cpu
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# the packages first (a layer that stays cached while only sources change), then the sources
COPY Makefile ./
COPY scripts/install-deps.sh scripts/
RUN make deps-build
COPY . .
RUN make -j"$(nproc)" CUDA=0 WERROR=1 install PREFIX=/usr/local DESTDIR=/out

# ---- operator: Debian slim, the operator binary and its shared libraries ------------------------
FROM debian:12-slim AS operator
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4 libcjson1 libmicrohttpd12 libyaml-0-2 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY --from=build-cpu /out/usr/local/bin/ringmaster /usr/local/bin/ringmaster
USER 65532:65532
EXPOSE 8080 8081 29400
ENTRYPOINT ["ringmaster", "operator"]

# ---- worker-cpu: Debian slim, OpenBLAS, Open MPI, the Fashion-MNIST data -------------------------
FROM debian:12-slim AS worker-cpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4 libcjson1 libmicrohttpd12 libyaml-0-2 \
      libopenblas0-pthread libopenmpi3 dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY --from=build-cpu /out/usr/local/bin/ringmaster-worker /usr/local/bin/ringmaster-worker
# the built-in data sets the project ships (builtin:tinyshakespeare; common/datasets.h)
COPY --from=build-cpu /out/usr/local/share/ringmaster/datasets /usr/local/share/ringmaster/datasets
# the default checkpoint folder, writable by the worker (a cluster mounts a shared volume over it)
RUN mkdir -p /checkpoints && chown 65532:65532 /checkpoints
USER 65532:65532
ENV HOME=/tmp
EXPOSE 9090
ENTRYPOINT ["ringmaster-worker"]
CMD ["train"]

# ---- worker (CUDA): CUDA devel to build (nvcc + NCCL), CUDA runtime to run -----------------------
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build-worker
RUN apt-get update && apt-get install -y --no-install-recommends make sudo ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make deps-build && make CUDA=1 install PREFIX=/usr/local DESTDIR=/out

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04 AS worker
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4t64 libcjson1 libmicrohttpd12t64 \
      libyaml-0-2 libopenblas0-pthread libopenmpi3t64 openmpi-bin dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-worker /out/usr/local/bin/ringmaster-worker /usr/local/bin/ringmaster-worker
COPY --from=build-worker /out/usr/local/share/ringmaster/datasets /usr/local/share/ringmaster/datasets
RUN mkdir -p /checkpoints && chown 65532:65532 /checkpoints
USER 65532:65532
ENV HOME=/tmp
EXPOSE 9090
ENTRYPOINT ["ringmaster-worker"]
CMD ["train"]
