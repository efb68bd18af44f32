"""Generic xDS, shaped like go-control-plane: the cache decides what each node group holds,
the server only speaks the protocol (SotW and delta ADS), the client consumes delta ADS.
"""
