#!/usr/bin/env python3
"""gemm_space.py — checks templates/gemm/gemm.yaml without building ktune or touching a GPU.

Mimics what the manifest loader and SearchSpace do (docs/templates.md): evaluates every
expression with a small muparser-like evaluator (+ - * / ^ %, comparisons, && || !, ?:,
min max abs floor ceil ceil_div log2 is_pow2), rejects unknown variables, enumerates the space
for a few problems on sm_80 / sm_90 limits, reports how many configs each constraint prunes,
checks that the heuristic yields a valid config, and cross-checks the manifest's `smem` against
an independent re-derivation of GemmConfig::kSmemBytes for every config.

Usage: python3 bench/kernel_check/gemm_space.py [templates/gemm/gemm.yaml]
       python3 bench/kernel_check/gemm_space.py --sample N ARCH LAYOUT M N K [yaml]
         prints N random valid configs of that problem as ktune_gemm<...> name expressions
         (bf16 in and out), for gemm_nvrtc_check's stdin.
"""
import itertools
import math
import re
import sys

import yaml

DEVICE = {
    "sm_90": dict(cc=90, sm_count=132, max_threads_per_block=1024, max_smem_per_block=232448,
                  max_regs_per_block=65536, max_regs_per_thread=255, l2_bytes=50 * 1024 * 1024),
    "sm_80": dict(cc=80, sm_count=108, max_threads_per_block=1024, max_smem_per_block=166912,
                  max_regs_per_block=65536, max_regs_per_thread=255, l2_bytes=40 * 1024 * 1024),
}

# ---- a small muparser-like expression evaluator --------------------------------------------
TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|(&&|\|\||<=|>=|==|!=|[-+*/^%<>!?:(),]))")
FUNCS = {
    "min": min, "max": max, "abs": abs, "floor": math.floor, "ceil": math.ceil,
    "ceil_div": lambda a, b: math.ceil(a / b), "log2": math.log2,
    "is_pow2": lambda x: 1.0 if x > 0 and float(x).is_integer() and (int(x) & (int(x) - 1)) == 0 else 0.0,
}


def tokenize(text):
    pos, out = 0, []
    text = str(text)
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = TOKEN.match(text, pos)
        if not m:
            raise SyntaxError(f"bad token at {pos} in '{text}'")
        out.append(m.group(1) and ("num", float(m.group(1))) or m.group(2) and ("id", m.group(2)) or ("op", m.group(3)))
        pos = m.end()
    out.append(("end", None))
    return out


class Parser:
    """Builds a closure tree; names are checked against `scope` at parse time."""
    BIN = [["||"], ["&&"], ["==", "!=", "<", "<=", ">", ">="], ["+", "-"], ["*", "/", "%"]]

    def __init__(self, text, scope):
        self.t, self.i, self.scope, self.text = tokenize(text), 0, scope, text
        self.used = set()

    def peek(self):
        return self.t[self.i]

    def take(self, val=None):
        tok = self.t[self.i]
        if val is not None and tok[1] != val:
            raise SyntaxError(f"expected '{val}' in '{self.text}'")
        self.i += 1
        return tok

    def parse(self):
        e = self.ternary()
        if self.peek()[0] != "end":
            raise SyntaxError(f"trailing input in '{self.text}'")
        return e

    def ternary(self):
        c = self.binary(0)
        if self.peek() == ("op", "?"):
            self.take()
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            return lambda v: a(v) if c(v) else b(v)
        return c

    def binary(self, level):
        if level == len(self.BIN):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.peek()[0] == "op" and self.peek()[1] in self.BIN[level]:
            op = self.take()[1]
            rhs = self.binary(level + 1)
            lhs = self.combine(op, lhs, rhs)
        return lhs

    @staticmethod
    def combine(op, a, b):
        f = {
            "||": lambda x, y: float(bool(x) or bool(y)), "&&": lambda x, y: float(bool(x) and bool(y)),
            "==": lambda x, y: float(x == y), "!=": lambda x, y: float(x != y),
            "<": lambda x, y: float(x < y), "<=": lambda x, y: float(x <= y),
            ">": lambda x, y: float(x > y), ">=": lambda x, y: float(x >= y),
            "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
            "/": lambda x, y: x / y if y else float("inf"),
            "%": lambda x, y: float(int(x) % int(y)) if y else float("nan"),
            "^": lambda x, y: x ** y,
        }[op]
        return lambda v: f(a(v), b(v))

    def unary(self):
        tok = self.peek()
        if tok == ("op", "-"):
            self.take()
            a = self.unary()
            return lambda v: -a(v)
        if tok == ("op", "!"):
            self.take()
            a = self.unary()
            return lambda v: float(not a(v))
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() == ("op", "^"):
            self.take()
            exp = self.unary()
            return self.combine("^", base, exp)
        return base

    def atom(self):
        kind, val = self.take()
        if kind == "num":
            return lambda v, c=val: c
        if kind == "op" and val == "(":
            e = self.ternary()
            self.take(")")
            return e
        if kind == "id":
            if self.peek() == ("op", "("):
                if val not in FUNCS:
                    raise NameError(f"unknown function '{val}' in '{self.text}'")
                self.take("(")
                args = [self.ternary()]
                while self.peek() == ("op", ","):
                    self.take()
                    args.append(self.ternary())
                self.take(")")
                fn = FUNCS[val]
                return lambda v: float(fn(*[a(v) for a in args]))
            if val not in self.scope:
                raise NameError(f"unknown variable '{val}' in '{self.text}'")
            self.used.add(val)
            return lambda v, n=val: v[n]
        raise SyntaxError(f"unexpected {val} in '{self.text}'")


def compile_expr(text, scope):
    return Parser(text, scope).parse()


# ---- manifest --------------------------------------------------------------------------------
def domain(spec):
    if isinstance(spec, list):
        return spec
    if "range" in spec:
        lo, hi = spec["range"]
        return list(range(lo, hi + 1, spec.get("step", 1)))
    return spec["values"]


def load(path):
    m = yaml.safe_load(open(path))
    params = {k: domain(v) for k, v in m["params"].items()}
    scope = set(params) | set(m["dims"]) | {"in_bytes", "out_bytes"} | set(DEVICE["sm_90"])
    for consts in m["layouts"].values():
        scope |= set(consts)
    derived = []
    for name, text in m["derived"].items():
        derived.append((name, compile_expr(text, scope)))
        scope.add(name)
    cons = []
    for c in m["constraints"]:
        text = c["expr"] if isinstance(c, dict) else c
        cons.append((text, compile_expr(text, scope)))
    launch = {k: [compile_expr(x, scope) for x in m["launch"][k]] for k in ("grid", "block")}
    launch["smem"] = compile_expr(m["launch"]["smem"], scope)
    for a in m["args"]:
        compile_expr(a.get("count", a.get("value")), scope)
    compile_expr(m["metric"]["flops"], scope)
    heur = []
    for r in m["heuristic"]:
        when = compile_expr(r["when"], scope) if "when" in r else (lambda v: 1.0)
        assert set(r["params"]) == set(params), f"heuristic rule params {r['params']} != {set(params)}"
        for k, val in r["params"].items():
            assert val in params[k], f"heuristic {k}={val} not in domain"
        heur.append((r.get("when", "<default>"), when, r["params"]))
    for t in m["template_args"]:
        assert t in params or t in ("T_IN", "T_OUT", "A_ROW", "B_ROW") or t in dict(derived), t
    return m, params, derived, cons, launch, heur


def kernel_smem(p, a_row, b_row):
    """Independent re-derivation of GemmConfig::kSmemBytes (gemm.cuh)."""
    def tile(rows, cols):
        return rows * (cols + (0 if p["SWIZZLE"] else 8)) * 2
    a = tile(p["BLOCK_M"], p["BLOCK_K"]) if a_row else tile(p["BLOCK_K"], p["BLOCK_M"])
    b = tile(p["BLOCK_K"], p["BLOCK_N"]) if b_row else tile(p["BLOCK_N"], p["BLOCK_K"])
    return p["STAGES"] * (a + b)


def evaluate(m, params, derived, cons, launch, arch, layout, dims, in_bytes=2, out_bytes=2):
    base = dict(DEVICE[arch])
    base.update(m["layouts"][layout])
    base.update(dims)
    base.update(in_bytes=in_bytes, out_bytes=out_bytes)
    names = list(params)
    total, valid, pruned, first_fail = 0, [], {}, {}
    for combo in itertools.product(*[params[n] for n in names]):
        v = dict(base)
        v.update(zip(names, combo))
        for name, f in derived:
            v[name] = f(v)
        total += 1
        ok = True
        for text, f in cons:
            if not f(v):
                pruned[text] = pruned.get(text, 0) + 1
                if ok:
                    first_fail[text] = first_fail.get(text, 0) + 1
                ok = False
        if ok:
            assert launch["smem"](v) == kernel_smem(v, v["A_ROW"], v["B_ROW"]), (combo, launch["smem"](v))
            valid.append(v)
    return total, valid, pruned, first_fail


def constraints_ok(cons, v):
    return all(f(v) for _, f in cons)


def sample(argv):
    import random
    n, arch, layout, M, N, K = int(argv[0]), argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    path = argv[6] if len(argv) > 6 else "templates/gemm/gemm.yaml"
    m, params, derived, cons, launch, heur = load(path)
    _, valid, _, _ = evaluate(m, params, derived, cons, launch, arch, layout, dict(M=M, N=N, K=K))
    random.seed(1234)
    for v in random.sample(valid, min(n, len(valid))):
        args = ["ktune_bf16", "ktune_bf16"] + [str(int(v[a])) for a in m["template_args"][2:]]
        print("ktune_gemm<" + ", ".join(args) + ">")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--sample":
        return sample(sys.argv[2:])
    path = sys.argv[1] if len(sys.argv) > 1 else "templates/gemm/gemm.yaml"
    m, params, derived, cons, launch, heur = load(path)
    print(f"{path}: loaded; {len(params)} params, {len(derived)} derived, {len(cons)} constraints")
    total = 1
    for d in params.values():
        total *= len(d)
    print(f"unpruned space: {total} configs")
    problems = [
        ("rc", dict(M=8192, N=8192, K=8192)), ("rr", dict(M=8192, N=8192, K=8192)),
        ("rc", dict(M=4096, N=4096, K=4096)), ("rc", dict(M=64, N=14336, K=4096)),
        ("rc", dict(M=16, N=4096, K=4096)), ("rr", dict(M=16, N=4096, K=4096)),
        ("rc", dict(M=1000, N=1000, K=1032)), ("rc", dict(M=77, N=136, K=200)),
        ("cc", dict(M=8, N=5, K=8)), ("rr", dict(M=1, N=8, K=8)), ("rc", dict(M=1, N=1, K=8)),
        ("cr", dict(M=4096, N=4096, K=4096)),
    ]
    for arch in ("sm_90", "sm_80"):
        for layout, dims in problems:
            t, valid, pruned, first = evaluate(m, params, derived, cons, launch, arch, layout, dims)
            top = sorted(pruned.items(), key=lambda kv: -kv[1])[:4]
            print(f"\n[{arch}] {layout} M={dims['M']} N={dims['N']} K={dims['K']}: {len(valid)} valid of {t}")
            for text, n in top:
                print(f"    prunes {n:6d} (first-failing {first.get(text, 0):6d}): {text}")
            # heuristic
            v0 = dict(DEVICE[arch]); v0.update(m["layouts"][layout]); v0.update(dims); v0.update(in_bytes=2, out_bytes=2)
            chosen = None
            for when_text, when, hp in heur:
                v = dict(v0); v.update(hp)
                for name, f in derived:
                    v[name] = f(v)
                if when(v) and constraints_ok(cons, v):
                    chosen = (when_text, hp)
                    break
            assert chosen, f"no valid heuristic rule for {layout} {dims} {arch}"
            hp = chosen[1]
            print(f"    heuristic [{chosen[0]}]: {hp['BLOCK_M']}x{hp['BLOCK_N']}x{hp['BLOCK_K']} "
                  f"w{hp['WARPS_M']}x{hp['WARPS_N']} st{hp['STAGES']} g{hp['GROUP_M']} sw{hp['SWIZZLE']} sk{hp['SPLIT_K']}")
            small = sum(1 for v in valid if v["BLOCK_M"] <= 32)
            print(f"    configs with BLOCK_M <= 32: {small}")
    # Like heuristic_config(): the first rule whose `when` holds and whose config passes the
    # constraints. Every aligned shape on the grid must get one; count the fall-throughs.
    missing, fell = 0, 0
    grid = [1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 1000, 1024,
            4096, 8192, 14336, 65536, 200000]
    for arch in ("sm_90", "sm_80"):
        for layout in m["layouts"]:
            for M, N, K in itertools.product(grid, grid, grid):
                v0 = dict(DEVICE[arch]); v0.update(m["layouts"][layout]); v0.update(M=M, N=N, K=K, in_bytes=2, out_bytes=2)
                align = (K % 8 == 0 if v0["A_ROW"] else M % 8 == 0) and (N % 8 == 0 if v0["B_ROW"] else K % 8 == 0)
                if not align:
                    continue
                first_match = True
                found = False
                for when_text, when, hp in heur:
                    v = dict(v0); v.update(hp)
                    for name, f in derived:
                        v[name] = f(v)
                    if when(v):
                        if constraints_ok(cons, v):
                            found = True
                            break
                        if first_match:
                            fell += 1
                        first_match = False
                if not found:
                    missing += 1
                    if missing <= 10:
                        print(f"NO valid heuristic rule for {arch} {layout} M={M} N={N} K={K}")
    print(f"\nheuristic: {missing} aligned shapes without a valid rule (must be 0); "
          f"{fell} where the first matching rule fell through to a later one")
    if missing:
        sys.exit(1)

if __name__ == "__main__":
    main()
