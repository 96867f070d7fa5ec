# Sourced by the project's scripts: puts the project's Node 24 first on PATH
# (the system npm then runs on it too).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$root/.tools/node24/bin:$PATH"
