"""Reading ``clowder.yaml`` safely: what the file may be, and a parse that cannot hurt.

The file is the user's (or a package's, or an attacker's who can write it): it may be a
directory or a FIFO, 50 MB, or YAML that takes seconds or gigabytes to parse.  ``read``
takes at most MAX_BYTES of a regular file, opened without blocking; ``load_isolated``
parses in a separate process (``python -m controld.configfile PATH``: the bytes on stdin,
one JSON answer on stdout), killed after PARSE_TIMEOUT seconds or past PARSE_MEMORY
bytes, so a daemon's event loop keeps serving whatever the file is.  What the schema
allows is ``controld/config.py``'s.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
import stat
import sys

from clowder_common.interpreter import module_argv

from .config import Config, ConfigError, from_dict, parse_bytes, to_dict

MAX_BYTES = 1 << 20
PARSE_TIMEOUT = 15.0  # seconds the parsing process may take (1 MiB: 2-5 s measured)
PARSE_MEMORY = 1 << 30  # bytes of address space it may use
MAX_ANSWER = 4 << 20  # bytes of validated configuration a daemon takes from it


def read(path: str) -> bytes:
    """The file's bytes; OSError (FileNotFoundError, IsADirectoryError...) propagates,
    ConfigError if it is larger than MAX_BYTES."""
    # O_NONBLOCK: a FIFO put in the file's place must not hang the open.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise ConfigError([f"{path}: larger than {MAX_BYTES >> 20} MiB, the most a "
                           "configuration may be"])
    return b"".join(chunks)


def load(path: str) -> Config:
    """Read and validate a file; OSError (e.g. FileNotFoundError) propagates."""
    return parse_bytes(read(path), path)


async def load_isolated(path: str, timeout: float = PARSE_TIMEOUT) -> Config:
    """load(), with the parsing in a separate process killed at ``timeout`` seconds and
    limited to PARSE_MEMORY: the caller's event loop keeps running meanwhile, and no
    file can stall or bloat it.  FileNotFoundError propagates; every other problem,
    I/O errors included, is a ConfigError."""
    try:
        data = await asyncio.to_thread(read, path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    proc = await asyncio.create_subprocess_exec(
        *module_argv("controld.configfile", path), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)

    async def talk() -> bytes:
        proc.stdin.write(data)
        proc.stdin.close()
        out = bytearray()
        while len(out) <= MAX_ANSWER:
            chunk = await proc.stdout.read(64 * 1024)
            if not chunk:
                break
            out += chunk
        if len(out) > MAX_ANSWER:
            raise ConfigError([f"{path}: the configuration is larger than "
                               f"{MAX_ANSWER >> 20} MiB once checked"])
        await proc.wait()
        return bytes(out)
    try:
        out = await asyncio.wait_for(talk(), timeout)
    except (BrokenPipeError, ConnectionResetError):
        out = b""  # the parser died before reading it all: its exit status says why
    except asyncio.TimeoutError:
        raise ConfigError([f"{path}: parsing took longer than {timeout:g} s and was "
                           "stopped"]) from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        how = (f"was killed by signal {-proc.returncode} (a crash, or past its "
               f"{PARSE_MEMORY >> 20} MiB)" if proc.returncode < 0
               else f"failed with exit status {proc.returncode}")
        raise ConfigError([f"{path}: the parser {how}"])
    if "errors" in answer:
        raise ConfigError(answer["errors"])
    return from_dict(answer["config"])


def _worker(path: str) -> None:
    """``python -m controld.configfile PATH``: the file's bytes on stdin, one JSON object
    on stdout: {"config": to_dict(...)} or {"errors": [...]}."""
    resource.setrlimit(resource.RLIMIT_AS, (PARSE_MEMORY, PARSE_MEMORY))
    os.nice(10)  # the daemon that waits comes first
    data = sys.stdin.buffer.read(MAX_BYTES + 1)
    try:
        answer = {"config": to_dict(parse_bytes(data, path))}
    except ConfigError as exc:
        answer = {"errors": exc.errors}
    except MemoryError:
        answer = {"errors": [f"{path}: needs more than {PARSE_MEMORY >> 20} MiB to parse"]}
    except Exception as exc:  # a parser bug: still the file's problem, said as such
        answer = {"errors": [f"{path}: the parser failed ({type(exc).__name__}: {exc})"]}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    _worker(sys.argv[1])
