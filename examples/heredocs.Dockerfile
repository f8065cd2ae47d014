# syntax=docker/dockerfile:1
# Heredocs: inline scripts and files, quoted (literal) and unquoted bodies.
FROM alpine:3.19
SHELL ["/bin/sh", "-eu", "-c"]
ARG GREETING=hello

RUN <<EOF
apk add --no-cache curl jq
mkdir -p /etc/app /usr/local/bin
EOF

# The quoted delimiter keeps $GREETING for the script to read at run time.
COPY --chmod=0755 <<'SCRIPT' /usr/local/bin/greet
#!/bin/sh
echo "${GREETING:-hi} from $(hostname)"
SCRIPT

# <<- strips leading tabs; two files in one COPY.
COPY <<-CONF /etc/app/app.conf <<-ENVFILE /etc/app/env
	listen = 0.0.0.0:8080
	greeting = ${GREETING}
	CONF
	APP_MODE=production
	ENVFILE

RUN <<-"EOT" bash -c 'cat > /etc/motd'
	Welcome. Nothing here expands: $HOME stays $HOME.
	EOT

RUN python3 - <<PY || true
print("heredoc as a program's stdin")
PY
CMD ["/usr/local/bin/greet"]
