# A C program built with autotools on Debian, shipped on a slim base.
FROM debian:bookworm AS builder
ARG JOBS=2
ENV DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
	apt-get update; \
	apt-get install -y --no-install-recommends \
		build-essential \
		autoconf \
		automake \
		libtool \
		pkg-config \
		libssl-dev \
		zlib1g-dev \
	; \
	rm -rf /var/lib/apt/lists/*
WORKDIR /usr/src/app
COPY configure.ac Makefile.am ./
COPY src/ src/
RUN autoreconf -fi \
	&& ./configure --prefix=/usr/local --disable-static CFLAGS="-O2 -g0" \
	&& make -j"$JOBS" \
	&& make check \
	&& make install-strip DESTDIR=/install

FROM debian:bookworm-slim
LABEL org.opencontainers.image.title="hello-c" \
      org.opencontainers.image.description="A small C daemon" \
      org.opencontainers.image.licenses=MIT
RUN apt-get update && apt-get install -y --no-install-recommends libssl3 zlib1g \
	&& rm -rf /var/lib/apt/lists/*
COPY --from=builder /install/usr/local/ /usr/local/
RUN ldconfig
VOLUME ["/var/lib/hello"]
STOPSIGNAL SIGINT
CMD ["hello", "--foreground"]
