"""Test function for secrets and the environment (e2e/secrets_test.go): it
reports what it saw of them, as digests, never the secret itself."""
import hashlib
import os


def digest(v):
    return hashlib.sha256(v.encode()).hexdigest() if v is not None else None


# Module-level code, run at boot before the snapshot: the environment is
# set, the secret is not.
AT_IMPORT = {"greeting": os.environ.get("GREETING"), "secret": "DB_PASSWORD" in os.environ}
seen_in_restore = None


def on_restore():
    global seen_in_restore
    seen_in_restore = digest(os.environ.get("DB_PASSWORD"))


def handle(event):
    return {"import_greeting": AT_IMPORT["greeting"], "import_secret": AT_IMPORT["secret"],
            "greeting": os.environ.get("GREETING"), "digest": digest(os.environ.get("DB_PASSWORD")),
            "on_restore": seen_in_restore}
