#!/bin/sh
# The image's entrypoint: refuse to start without an external PostgreSQL, then run the command.
#
# Switchboard falls back to an embedded PostgreSQL when SWITCHBOARD_DATABASE_URL is unset. Inside a
# container that would put the queue's only state in the container's own filesystem, so the image
# turns the fallback off: set SWITCHBOARD_DATABASE_URL, or SWITCHBOARD_IMAGE_EMBEDDED_DB=1 with a
# volume at SWITCHBOARD_DATA_DIR (/var/lib/switchboard) to keep the embedded server on purpose.
set -eu

if [ -z "${SWITCHBOARD_DATABASE_URL:-}" ] && [ "${SWITCHBOARD_IMAGE_EMBEDDED_DB:-0}" != "1" ]; then
    echo "error: SWITCHBOARD_DATABASE_URL is not set; this image expects an external PostgreSQL" \
         "(postgresql://USER:PASSWORD@HOST:5432/DBNAME), or SWITCHBOARD_IMAGE_EMBEDDED_DB=1 with a volume" \
         "at SWITCHBOARD_DATA_DIR for the embedded one (docs/deploy.md)" >&2
    exit 2
fi

exec "$@"
