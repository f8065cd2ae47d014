# syntax=docker/dockerfile:1
# ARG-heavy: global ARGs before the first FROM, re-declared per stage, defaults
# built from other ARGs, and ARGs used in FROM, flags and RUN.
ARG REGISTRY=docker.io
ARG BASE_IMAGE=library/debian
ARG BASE_TAG=bookworm-slim
ARG NODE_MAJOR=20 \
    YARN_VERSION=1.22.22
ARG BUILDKIT_INLINE_CACHE=1
ARG TARGETPLATFORM
ARG TARGETARCH TARGETVARIANT

FROM --platform=${TARGETPLATFORM:-linux/amd64} ${REGISTRY}/${BASE_IMAGE}:${BASE_TAG} AS base
ARG NODE_MAJOR
ARG DEBIAN_FRONTEND=noninteractive
ARG APT_OPTS="-y --no-install-recommends"
RUN apt-get update && apt-get install ${APT_OPTS} ca-certificates curl gnupg \
 && curl -fsSL "https://deb.nodesource.com/setup_${NODE_MAJOR}.x" | bash - \
 && apt-get install ${APT_OPTS} nodejs \
 && rm -rf /var/lib/apt/lists/*

FROM base AS deps
ARG YARN_VERSION
ARG NPM_CONFIG_LOGLEVEL=warn
ENV NPM_CONFIG_LOGLEVEL=${NPM_CONFIG_LOGLEVEL} \
    YARN_VERSION=$YARN_VERSION
WORKDIR /app
COPY package.json yarn.lock ./
RUN --mount=type=cache,id=yarn-${TARGETARCH}${TARGETVARIANT},target=/usr/local/share/.cache/yarn \
    npm install -g "yarn@${YARN_VERSION}" && yarn install --frozen-lockfile

FROM deps AS build
ARG NODE_ENV=production
ARG GIT_COMMIT=unknown
ARG BUILD_DATE
LABEL org.opencontainers.image.revision=$GIT_COMMIT \
      org.opencontainers.image.created=${BUILD_DATE:-unset}
COPY . .
RUN NODE_ENV=$NODE_ENV yarn build

FROM base
ARG UID=1000 GID=1000
ARG PORT=3000
RUN groupadd --gid "$GID" app && useradd --uid "$UID" --gid app --create-home app
COPY --from=build --chown=${UID}:${GID} /app/dist /srv/app
ENV PORT=${PORT}
EXPOSE ${PORT}
USER ${UID}:${GID}
WORKDIR /srv/app
CMD ["node", "server.js"]
