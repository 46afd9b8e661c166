import json
import subprocess
import sys


def test_bench_store_reports_both_modes_and_the_baseline(tmp_path, subprocess_env):
    out = subprocess.run(
        [sys.executable, "-m", "mqctl", "bench", "store", "--records", "3000", "--sync-records", "1000",
         "--concurrency", "32", "--rounds", "1", "--dir", str(tmp_path), "--json"],
        capture_output=True, text=True, env=subprocess_env, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    names = [r["name"] for r in result["median"]]
    assert names[0] == "raw os.write()" and "async" in names[1] and "sync" in names[2]
    assert all(r["records"] > 0 and r["mb_per_s"] > 0 for r in result["median"])
    assert result["median"][2]["records"] == 1000
    assert result["async_to_raw_ratio"] > 0 and len(result["round_ratios"]) == 1
    assert list(tmp_path.iterdir()) == [], "bench must clean up after itself"
