# The OpenEnv server (`inferencegym serve`, extra [server]) in a container, task 1 (its newest version) by default.
#
#   docker build -t inferencegym-server .
#   docker run --rm -p 127.0.0.1:8000:8000 inferencegym-server
#   curl http://127.0.0.1:8000/health        # {"status":"healthy"} once compiled (~30-60 s)
#
# Other tasks: append the command, e.g. `docker run ... inferencegym-server inferencegym serve
# --host 0.0.0.0 --task 1 --task 2`. Without Docker Hub, build on any Debian/Ubuntu image that
# has python3 (>= 3.11) and python3-venv: `--build-arg BASE=<image>`; scripts/docker_check.sh
# makes one with debootstrap and checks the whole image end to end.
ARG BASE=python:3.11-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A venv works on both kinds of base: Debian's system python refuses pip installs (PEP 668).
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Only what the wheel needs (pyproject.toml's packages and package-dir, and its readme).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY inferencegym_jax ./inferencegym_jax
COPY training ./training
COPY data ./data
COPY configs ./configs
# The server extra only: no torch ([sb3] and [dev] pull it); the last line makes sure of that.
RUN pip install ".[server]" \
 && rm -rf /src \
 && python -c "import importlib.util as u, sys; sys.exit('torch was installed' if u.find_spec('torch') else 0)"

RUN useradd --create-home --uid 10001 --user-group inferencegym
USER inferencegym
WORKDIR /home/inferencegym

EXPOSE 8000
# The image has no curl; python asks. The server opens its port only after compiling.
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request as r; sys.exit(r.urlopen('http://127.0.0.1:8000/health', timeout=4).status != 200)"]
# 0.0.0.0, not the CLI's default 127.0.0.1: inside a container the loopback address cannot be
# reached through a published port (-p). Publish it on the host's loopback (-p 127.0.0.1:8000:8000)
# unless the server should be reachable from other machines.
CMD ["inferencegym", "serve", "--host", "0.0.0.0", "--port", "8000", "--task", "1"]
