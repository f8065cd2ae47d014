# A Python web application with a virtualenv built in a separate stage.
FROM python:3.12-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

FROM base AS deps
RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"
COPY requirements.txt .
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -r requirements.txt

FROM base
ARG UID=10001
RUN useradd --uid "${UID}" --create-home --shell /usr/sbin/nologin appuser
COPY --from=deps /opt/venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"
WORKDIR /app
COPY --chown=appuser:appuser . .
USER appuser
EXPOSE 8000
ONBUILD COPY requirements-extra.txt /tmp/
ONBUILD RUN pip install -r /tmp/requirements-extra.txt
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
CMD gunicorn --bind 0.0.0.0:8000 --workers 2 app.wsgi:application
