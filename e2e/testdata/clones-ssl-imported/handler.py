"""Test function for distinct clones (e2e/clones_test.go): ssl is imported
before the snapshot but its generator is first used in a clone."""
import ssl


def handle(event):
    return {"ssl_rand": ssl.RAND_bytes(8).hex()}
