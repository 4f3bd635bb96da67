#!/bin/sh
# A PyPy venv for the load clients (root: installs Debian's pypy3).  bench.py's AMQP client
# under CPython spends about 125 us of CPU per message moved, which caps its end-to-end rate
# near 8,000 msg/s whatever the broker; under PyPy the same code costs a half to two thirds of that.
#
#   bench/pypy_client.sh [VENV]            # default /tmp/pypy-venv
#   python bench/protocol_bench.py --protocol amqp --targets waystation,rabbitmq \
#       --client-python /tmp/pypy-venv/bin/python
set -eu
venv=${1:-/tmp/pypy-venv}
command -v pypy3 >/dev/null || apt-get install -y -q pypy3 pypy3-venv
[ -x "$venv/bin/python" ] || pypy3 -m venv "$venv"
"$venv/bin/python" -m pip install -q python-qpid-proton
"$venv/bin/python" -c 'import proton, sys; print(sys.executable, "proton", proton.VERSION)'
