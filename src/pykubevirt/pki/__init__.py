"""Private CAs and the certificates they issue, shared by the API server's and virt-handler's TLS."""
