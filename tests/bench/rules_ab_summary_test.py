"""bench/launch/rules_ab_summary.py on files shaped as graph_torch.py writes them."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "launch"))
import rules_ab_summary  # noqa: E402


def shape(m, ratio, rel_l2=0.0, fallbacks=0):
    return {"shape": [m, 4096, 4096], "torch_over_ktune_graph": ratio,
            "worst_rel_l2_vs_torch": rel_l2, "fallbacks": fallbacks}


class SummaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ktune-ab-")
        files = {
            "head-1": [shape(512, 0.60), shape(1280, 0.65)],
            "head-2": [shape(512, 0.62), shape(1280, 0.66)],
            # round 1 of new: 1280's output did not match torch's; round 2: a fallback at 512
            "new-1": [shape(512, 0.90), shape(1280, 0.86, rel_l2=0.5)],
            "new-2": [shape(512, 0.91, fallbacks=1), shape(1280, 0.88)],
        }
        for name, shapes in files.items():
            with open(os.path.join(self.dir, "graph-torch-%s.json" % name), "w") as f:
                json.dump({"shapes": shapes}, f)
        with open(os.path.join(self.dir, "graph-torch-new-3.log"), "w") as f:
            f.write("a failed run's log is no result")

    def test_means_spreads_and_ratios_over_the_first_variant(self):
        out = os.path.join(self.dir, "summary.json")
        with redirect_stdout(io.StringIO()) as text:
            self.assertEqual(rules_ab_summary.main([self.dir, "--variants", "head,new", "--json", out]), 0)
        with open(out) as f:
            s = json.load(f)
        rows = {r["shape"]: r["variants"] for r in s["shapes"]}
        self.assertEqual(list(rows), ["512x4096x4096", "1280x4096x4096"])
        self.assertAlmostEqual(rows["512x4096x4096"]["head"]["mean"], 0.61)
        self.assertAlmostEqual(rows["512x4096x4096"]["head"]["spread"], 0.02)
        self.assertEqual(rows["512x4096x4096"]["new"]["rounds"], [0.90])
        self.assertAlmostEqual(rows["512x4096x4096"]["new"]["over_first"], 0.90 / 0.61)
        self.assertEqual(rows["1280x4096x4096"]["new"]["rounds"], [0.88])
        self.assertEqual(sorted(s["dropped"]["new"]), ["1280x4096x4096 round 1", "512x4096x4096 round 2"])
        self.assertNotIn("head", s["dropped"])
        self.assertIn("x1.475", text.getvalue())
        self.assertIn("dropped for new", text.getvalue())

    def test_the_first_variant_given_is_the_baseline(self):
        with redirect_stdout(io.StringIO()):
            rules_ab_summary.main([self.dir, "--variants", "new,head", "--json", os.path.join(self.dir, "s.json")])
        with open(os.path.join(self.dir, "s.json")) as f:
            s = json.load(f)
        self.assertAlmostEqual(s["shapes"][0]["variants"]["head"]["over_first"], 0.61 / 0.90)

    def test_a_variant_without_files_is_an_error(self):
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
            self.assertEqual(rules_ab_summary.main([self.dir, "--variants", "head,none"]), 1)
            self.assertEqual(rules_ab_summary.main([tempfile.mkdtemp()]), 1)
        self.assertIn("no files for variant(s) none", err.getvalue())

if __name__ == "__main__":
    unittest.main()
