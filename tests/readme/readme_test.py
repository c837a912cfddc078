#!/usr/bin/env python3
"""Runs README.md's commands and snippets verbatim, so the README cannot drift from the code.

A fenced block is tested when the line before it is `<!-- readme-test: NAME -->`; every NAME
below must be present exactly once. Each part runs in a temporary HOME, nowhere near the checkout,
against a real ktuned:

  install  the install block (cmake --install build --prefix ~/.local, PATH, start ktuned), then
  cli      every line of "Using it" with the installed ktune. On a machine without a GPU a line
           may fail with the daemon's "no GPU" error only if the same line with
           `--device nvidia-h200` appended then succeeds (the shipped table's class), or is
           refused for the missing GPU alone (tune, kernel): never for a usage error.
  cpp      the C++ snippet, its #include lines first and its statements in a function body,
           built against the installed package by a CMake project that sets no C++ standard
  python   the pip install block, then the Python snippet with the venv's interpreter

Usage: readme_test.py {install-cli,cpp,python} BUILD_DIR SOURCE_DIR
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^<!-- readme-test: ([a-z-]+) -->$")
NAMES = ("install", "cli", "cpp", "python-install", "python")
# How the daemon says this node has no GPU to answer or tune with.
NO_GPU = re.compile(r"this node has no GPU|its GPUs: none")
H200 = ["--device", "nvidia-h200"]


class Failure(Exception):
    pass


def extract(readme_path):
    """{name: block text} for every marked fenced block; raises Failure on a missing mark."""
    lines = open(readme_path, encoding="utf-8").read().splitlines()
    blocks = {}
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        name = m.group(1)
        if name in blocks:
            raise Failure(f"README.md:{i + 1}: readme-test mark {name!r} used twice")
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise Failure(f"README.md:{i + 1}: readme-test mark {name!r} is not followed by a fence")
        end = i + 2
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        blocks[name] = "\n".join(lines[i + 2:end]) + "\n"
    missing = [n for n in NAMES if n not in blocks]
    if missing:
        raise Failure(f"README.md has no readme-test block for {missing}")
    return blocks


def run(cmd, env, cwd, timeout=120, shell=False):
    p = subprocess.run(cmd, env=env, cwd=cwd, shell=shell, executable="/bin/bash" if shell else None,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


def home_env(tmp):
    """A newcomer's environment: HOME, runtime and state directories all under tmp."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KTUNE_", "XDG_", "PYTHON"))}
    env["HOME"] = tmp
    env["XDG_RUNTIME_DIR"] = os.path.join(tmp, "run")
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700)
    # Other daemons (other tests, other users) may hold the default metrics port.
    env["KTUNE_METRICS"] = "127.0.0.1:0"
    return env


def wait_for_socket(path, proc=None, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise Failure(f"ktuned exited with {proc.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                s.sendall(b'{"id":1,"v":1,"op":"status"}\n')
                reply = s.makefile().readline()
                if '"pid"' in reply:
                    return int(re.search(r'"pid":\s*(\d+)', reply).group(1))
        except OSError:
            pass
        time.sleep(0.05)
    raise Failure(f"no daemon answered on {path}")


def start_ktuned(build, tmp, env):
    """The built ktuned on a socket of its own, serving the shipped tables."""
    sock = os.path.join(tmp, "ktuned.sock")
    log = open(os.path.join(tmp, "ktuned.log"), "ab")
    proc = subprocess.Popen([os.path.join(build, "daemon", "ktuned"), "--socket", sock,
                             "--data-dir", os.path.join(tmp, "data"),
                             "--set", "server.metrics=127.0.0.1:0"],
                            stdout=log, stderr=log, env=env)
    log.close()
    wait_for_socket(sock, proc)
    return proc, sock


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def install(build, tmp):
    """cmake --install of the test's build tree, to the test's prefix (for cpp)."""
    prefix = os.path.join(tmp, "prefix")
    rc, out = run(["cmake", "--install", build, "--prefix", prefix], os.environ, tmp, 300)
    if rc != 0:
        raise Failure("cmake --install failed:\n" + out)
    return prefix


def node_has_gpu(status_out):
    return not re.search(r"gpus\s+none", status_out)


def test_install_cli(blocks, build, src, tmp):
    env = home_env(tmp)
    os.symlink(build, os.path.join(tmp, "build"))  # the README's `build`, from the README's cwd
    shutil.copy(os.path.join(src, "tests", "readme", "shapes.yaml"), tmp)
    rc, out = run(blocks["install"], env, tmp, 300, shell=True)
    if rc != 0:
        raise Failure(f"install block failed (rc {rc}):\n{blocks['install']}\n{out}")
    env["PATH"] = os.path.join(tmp, ".local", "bin") + os.pathsep + env["PATH"]
    pid = wait_for_socket(os.path.join(env["XDG_RUNTIME_DIR"], "ktune", "ktuned.sock"))
    try:
        rc, which = run(["bash", "-c", "command -v ktune"], env, tmp)
        if which.strip() != os.path.join(tmp, ".local", "bin", "ktune"):
            raise Failure(f"`ktune` is not the installed one: {which}")
        has_gpu = None
        for line in blocks["cli"].splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            rc, out = run(line, env, tmp, 120, shell=True)
            if has_gpu is None and words[:2] == ["ktune", "status"] and rc == 0:
                has_gpu = node_has_gpu(out)
            if rc == 0:
                print(f"ok: {line}")
                continue
            if has_gpu is False and NO_GPU.search(out):
                retry = line if "--device" in words else shlex.join(words + H200)
                rc2, out2 = run(retry, env, tmp, 120, shell=True)
                if rc2 == 0:
                    print(f"ok (no GPU here, with --device nvidia-h200): {line}")
                    continue
                if NO_GPU.search(out2):  # parsed and understood; only a GPU can run it
                    print(f"ok (needs a GPU, refused for that alone): {retry}")
                    continue
                raise Failure(f"rc {rc2}: {retry}\n{out2}")
            raise Failure(f"rc {rc}: {line}\n{out}")
        if has_gpu is None:
            raise Failure("the cli block has no `ktune status` line that succeeded")
    finally:
        os.kill(pid, signal.SIGTERM)


CPP_MAIN = """\
// Generated by tests/readme/readme_test.py from README.md's C++ snippet.
{includes}
#include <cstdint>
#include <cstdio>
#include <string>

static std::string g_fallback;
static void fallback_to_cublas(const std::string& why) {{ g_fallback = why.empty() ? "?" : why; }}

static int readme_snippet(std::uint64_t x, std::uint64_t w, std::uint64_t y, void* stream) {{
{body}
  // The snippet's client must have reached the daemon, and a fallback must say why.
  if (!client.status()) {{ std::puts("client did not reach ktuned"); return 2; }}
  std::printf("launched: %d, fallback: %s\\n", ok ? 1 : 0, g_fallback.c_str());
  return ok || !g_fallback.empty() ? 0 : 3;
}}

int main() {{ return readme_snippet(0, 0, 0, nullptr); }}
"""

CPP_PROJECT = """\
# The README's C++ snippet as an application: no C++ standard set here on purpose.
cmake_minimum_required(VERSION 3.25)
project(readme_cpp CXX)
find_package(ktune REQUIRED)
add_executable(readme_cpp main.cc)
target_link_libraries(readme_cpp PRIVATE ktune::client)
"""


def test_cpp(blocks, build, src, tmp):
    prefix = install(build, tmp)
    lines = blocks["cpp"].splitlines()
    includes = "\n".join(l for l in lines if l.startswith("#include"))
    if "#include <ktune/client.h>" not in includes:
        raise Failure("the C++ snippet does not include <ktune/client.h>")
    body = "\n".join("  " + l for l in lines if not l.startswith("#include"))
    proj = os.path.join(tmp, "app")
    os.makedirs(proj)
    open(os.path.join(proj, "main.cc"), "w").write(CPP_MAIN.format(includes=includes, body=body))
    open(os.path.join(proj, "CMakeLists.txt"), "w").write(CPP_PROJECT)
    env = {k: v for k, v in os.environ.items() if k not in ("CXXFLAGS", "CPATH", "CPLUS_INCLUDE_PATH")}
    for cmd in (["cmake", "-S", proj, "-B", os.path.join(proj, "build"), f"-DCMAKE_PREFIX_PATH={prefix}"],
                ["cmake", "--build", os.path.join(proj, "build")]):
        rc, out = run(cmd, env, tmp, 300)
        if rc != 0:
            raise Failure(f"{shlex.join(cmd)} failed:\n{out}\n--- main.cc:\n" +
                          open(os.path.join(proj, "main.cc")).read())
    proc, sock = start_ktuned(build, tmp, env)
    try:
        env["KTUNE_SOCKET"] = sock  # the snippet's default-constructed Client finds it
        rc, out = run([os.path.join(proj, "build", "readme_cpp")], env, tmp, 120)
        print(out)
        if rc != 0:
            raise Failure(f"the C++ snippet exited {rc}:\n{out}")
    finally:
        stop(proc)


PY_HARNESS = """\
import os, sys
sys.path = [p for p in sys.path if p not in ("", os.getcwd())]
import ktune
assert "site-packages" in ktune.__file__, ktune.__file__
client = ktune.Client()
no_gpu = not client.status().get("gpus")
if no_gpu:  # answer for the shipped table's class, as the CLI test does
    lookup = ktune.Client.lookup
    ktune.Client.lookup = lambda self, op, **kw: lookup(self, op, **{"device": "nvidia-h200", **kw})
snippet = open(sys.argv[1]).read()
scope = {}
exec(compile(snippet, "README.md (python)", "exec"), scope)
best = scope["best"]
print("best:", best.provenance, best.template, best.params)
assert best.template and best.params, best
if no_gpu:
    assert best.provenance == "exact", best.provenance
"""


def pick_python():
    """The first python3 on PATH whose venvs can build with the system setuptools and wheel."""
    for d in os.environ["PATH"].split(os.pathsep):
        exe = os.path.join(d, "python3")
        if os.access(exe, os.X_OK) and subprocess.run(
                [exe, "-c", "import setuptools, wheel, venv, ensurepip"],
                stderr=subprocess.DEVNULL).returncode == 0:
            return d
    raise Failure("no python3 with setuptools, wheel and venv "
                  "(apt install python3-venv python3-setuptools python3-wheel)")


def test_python(blocks, build, src, tmp):
    version = re.search(r'^version = "([^"]+)"',
                        open(os.path.join(src, "client", "python", "pyproject.toml")).read(), re.M)
    project = re.search(r"project\(ktune VERSION ([0-9.]+)",
                        open(os.path.join(src, "CMakeLists.txt")).read())
    if not version or not project or version.group(1) != project.group(1):
        raise Failure("client/python/pyproject.toml's version is not the project's")
    env = home_env(tmp)
    env["PATH"] = pick_python() + os.pathsep + env["PATH"]
    env["PIP_NO_INDEX"] = "1"  # offline, as CI is: the install must not need a download
    # A copy of client/python at the README's relative path, so the build writes nothing into
    # the checkout.
    shutil.copytree(os.path.join(src, "client", "python"), os.path.join(tmp, "client", "python"),
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    rc, out = run(blocks["python-install"], env, tmp, 300, shell=True)
    if rc != 0:
        raise Failure(f"python-install block failed (rc {rc}):\n{out}")
    venv_python = os.path.join(tmp, ".venvs", "ktune", "bin", "python")
    proc, sock = start_ktuned(build, tmp, env)
    try:
        env["KTUNE_SOCKET"] = sock
        open(os.path.join(tmp, "snippet.py"), "w").write(blocks["python"])
        open(os.path.join(tmp, "harness.py"), "w").write(PY_HARNESS)
        rc, out = run([venv_python, "harness.py", "snippet.py"], env, tmp, 120)
        print(out)
        if rc != 0:
            raise Failure(f"the Python snippet failed (rc {rc}):\n{blocks['python']}\n{out}")
    finally:
        stop(proc)


def main():
    part, build, src = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    tests = {"install-cli": test_install_cli, "cpp": test_cpp, "python": test_python}
    tmp = tempfile.mkdtemp(prefix="ktune-readme-")
    try:
        tests[part](extract(os.path.join(src, "README.md")), build, src, tmp)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}")
        for log in ("ktuned.log",):
            path = os.path.join(tmp, log)
            if os.path.exists(path):
                print(f"--- {log}:\n" + open(path, errors="replace").read()[-4000:])
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
