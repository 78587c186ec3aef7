-- Which todos moved, told to every serving process (core/live_notes.py). The channel is the
-- constant `live_notes.CHANNEL`, written here as text: a statement's text is static.

-- name: announce
SELECT pg_notify('switchboard_live', %(note)s)
