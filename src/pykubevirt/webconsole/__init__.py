"""The web console: a small proxy that serves the browser front-end and forwards its API calls with the user's token."""
