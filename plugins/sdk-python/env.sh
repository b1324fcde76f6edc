# Shared by `build` and `test` (sourced, not run): the pinned toolchain venv.
#
# The venv lives at ${KUBEPLUG_CACHE:-$HOME/.cache/kubeplug}/py/venv-<hash>,
# the hash covering requirements.txt and the Python that made it, so a bump
# of either makes a fresh venv and an old one is never half-updated. Nothing
# is written into the source tree.

sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$sdk/../.." && pwd)
cache=${KUBEPLUG_CACHE:-$HOME/.cache/kubeplug}/py
python=${PYTHON:-python3}

venv_hash=$( { cat "$sdk/requirements.txt"; "$python" -c 'import sys; print(sys.version)'; } \
    | sha256sum | cut -c1-16)
venv=$cache/venv-$venv_hash

# Create the venv once; `.complete` marks a finished install, so a venv an
# interrupted run left behind is rebuilt rather than trusted.
ensure_venv() {
    if [ -f "$venv/.complete" ]; then
        return
    fi
    mkdir -p "$cache"
    (
        # One installer at a time (parallel builds share the cache).
        if command -v flock >/dev/null; then flock 9; fi
        if [ ! -f "$venv/.complete" ]; then
            rm -rf "$venv"
            echo "kubeplug-py: creating toolchain venv $venv" >&2
            "$python" -m venv "$venv"
            "$venv/bin/pip" install --quiet --disable-pip-version-check \
                --require-hashes -r "$sdk/requirements.txt"
            touch "$venv/.complete"
        fi
    ) 9>"$cache/.venv.lock"
}
