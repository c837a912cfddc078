"""bench/tables/make_table.sh (what makes a shipped table, tables/<gpu>.json) end to end without a
GPU: a real ktuned tunes each listed problem with the fake worker, and the export holds one
winner per problem, its device and its ranked configs; a refused problem fails the run and the
others are still exported. Needs KTUNED, KTUNE_CLI and FAKE_WORKER (ctest sets them).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class MakeTableTest(unittest.TestCase):
    def run_script(self, problems: str):
        d = tempfile.mkdtemp(prefix="ktune-make-table-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        kit, out = os.path.join(d, "kit"), os.path.join(d, "out")
        os.makedirs(kit)
        for name, env in (("ktuned", "KTUNED"), ("ktune", "KTUNE_CLI")):
            os.symlink(os.path.abspath(os.environ[env]), os.path.join(kit, name))
        path = os.path.join(d, "problems.txt")
        with open(path, "w") as f:
            f.write(problems)
        env = dict(os.environ, K=kit, OUT=out, PROBLEMS=path, TRIALS="4", JOB_SECONDS="30",
                   SEEDS="", WORKER=os.path.abspath(os.environ["FAKE_WORKER"]), KTUNE_HOME=ROOT,
                   DAEMON_SETS="tuning.devices=0 templates.compile_threads=2")
        run = subprocess.run(["bash", os.path.join(ROOT, "bench", "tables", "make_table.sh")],
                             env=env, capture_output=True, text=True, timeout=200)
        table = None
        if os.path.exists(os.path.join(out, "table.json")):
            with open(os.path.join(out, "table.json")) as f:
                table = json.load(f)
        return run, table

    def test_every_problem_is_tuned_and_exported(self):
        run, table = self.run_script("# a comment\n\ngemm bf16 rc M=64,N=256,K=128\n"
                                     "softmax bf16 - rows=64,cols=1024\n")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("all tuned", run.stdout)
        self.assertEqual(table["count"], 2)
        got = sorted((w["problem"]["op"], tuple(sorted(w["problem"]["dims"].items())))
                     for w in table["winners"])
        self.assertEqual(got, [("gemm", (("K", 128), ("M", 64), ("N", 256))),
                               ("softmax", (("cols", 1024), ("rows", 64)))])
        for w in table["winners"]:
            self.assertEqual(w["device"]["name"], "Fake GPU")
            self.assertGreaterEqual(len(w["ranked"]), 1)
            self.assertGreater(w["ranked"][0]["median_us"], 0)

    def test_a_refused_problem_fails_the_run_and_the_rest_is_exported(self):
        run, table = self.run_script("softmax bf16 - rows=64,cols=1024\n"
                                     "softmax bf16 - rows=64\n")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("some problems failed", run.stdout)
        self.assertEqual(table["count"], 1)


if __name__ == "__main__":
    unittest.main()
