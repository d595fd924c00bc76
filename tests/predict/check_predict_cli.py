#!/usr/bin/python3
"""ctest: `ringtrain predict` end to end on a synthetic logistic regression: the table, the JSON rows (ranks, step_s,
samples_per_s, efficiency, dominant, best), and exit 2 with one line for bad flags."""
import json
import os
import subprocess
import sys
import tempfile

root, binary = sys.argv[1], sys.argv[2]
base = [binary, "predict", "--config", os.path.join(root, "configs/logreg_fashion.json"), "--set", "data.format=synthetic",
        "--steps", "5"]
with tempfile.TemporaryDirectory() as tmp:
    js = os.path.join(tmp, "p.json")
    p = subprocess.run(base + ["--ranks", "1,2,8", "--link", "1gbit,50us", "--straggler", "0.05", "--json", js],
                       capture_output=True, text=True, cwd=tmp)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, p.returncode
    assert "dominant" in p.stdout and "best setting" in p.stdout
    doc = json.load(open(js))
    rows = doc["rows"]
    assert [r["ranks"] for r in rows] == [1, 2, 8]
    for r in rows:
        for k in ("step_s", "samples_per_s", "efficiency", "dominant", "best", "terms_s"):
            assert k in r, k
    assert rows[0]["efficiency"] == 1.0
    assert rows[2]["efficiency"] < rows[1]["efficiency"] < 1.0  # more ranks, more latency and the straggler
    assert rows[1]["terms_s"]["straggler"] > 0
    assert abs(doc["link"]["gbit_per_s"] - 1.0) < 1e-9 and abs(doc["link"]["alpha_s"] - 50e-6) < 1e-12
    assert len(doc["profile"]["gradients"]) == 2 and all(g["ready_s"] >= 0 for g in doc["profile"]["gradients"])
    # Neither --link nor --measure: the default link, said in the table's header and the JSON.
    js3 = os.path.join(tmp, "p3.json")
    p = subprocess.run(base + ["--ranks", "2", "--profile", js, "--json", js3], capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr
    assert "default 10gbit,5us" in p.stdout, p.stdout
    doc3 = json.load(open(js3))
    assert abs(doc3["link"]["gbit_per_s"] - 10.0) < 1e-9 and abs(doc3["link"]["alpha_s"] - 5e-6) < 1e-12
    assert doc3["link"]["source"].startswith("default") and doc3["link"]["measured"] is None, doc3["link"]
    # --profile: the saved profile again, no measurement: the same link gives the same rows exactly.
    js2 = os.path.join(tmp, "p2.json")
    p = subprocess.run(base + ["--ranks", "1,2,8", "--link", "1gbit,50us", "--straggler", "0.05", "--profile", js,
                               "--json", js2], capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr
    assert [r["step_s"] for r in json.load(open(js2))["rows"]] == [r["step_s"] for r in rows]
    # A tampered profile (a negative gradient size, a negative time) is exit 2 naming .profile, not a wrapped count.
    for key, path in (("floats", ("gradients", 0)), ("forward_s", ())):
        doc2 = json.load(open(js))
        node = doc2["profile"]
        for part in path:
            node = node[part]
        node[key] = -1
        bad_js = os.path.join(tmp, "bad-" + key + ".json")
        json.dump(doc2, open(bad_js, "w"))
        p = subprocess.run(base + ["--link", "1gbit", "--profile", bad_js], capture_output=True, text=True, cwd=tmp)
        assert p.returncode == 2 and ".profile" in p.stderr and key in p.stderr, (key, p.returncode, p.stderr)
    for bad, want in ((["--link", "1gbps"], "unknown unit 'gbps'"), (["--ranks", "0", "--link", "1gbit"], "--ranks"),
                      (["--link", "1gbit", "--measure"], "alternatives"),
                      (["--link", "1gbit", "--profile", base[3]], "not a profile written by"), (["--link", "1gbit", "--bogus", "1"], "unknown argument"),
                      (["--ranks", "2", "--ranks", "4"], "--ranks given twice"), (["--link", "1gbit", "--link=10gbit"], "--link given twice"),
                      (["--json", os.path.join(tmp, "no/such/folder/x.json")], "--json: cannot write")):
        p = subprocess.run(base + bad, capture_output=True, text=True, cwd=tmp)
        assert p.returncode == 2, (bad, p.returncode, p.stderr)
        assert want in p.stderr and p.stderr.count("\n") == 1, (bad, p.stderr)
        assert p.stdout == "", (bad, p.stdout)  # refused before the profile: no table was printed
    # A profile of another batch or model predicts another run: refused, naming both.
    for other, want in (([], "measured at train.batch_size 200, the config has 64"),
                        (["--set", "model=" + os.path.join(root, "models/lenet5.json")], "was measured with the model")):
        p = subprocess.run([binary, "predict", "--config", os.path.join(root, "configs/logreg_fashion.json"), "--set",
                            "data.format=synthetic", "--set", "train.batch_size=64", "--link", "1gbit", "--profile", js]
                           + other, capture_output=True, text=True, cwd=tmp)
        if other:  # the model changed and the batch given back: only the model differs
            p = subprocess.run([binary, "predict", "--config", os.path.join(root, "configs/logreg_fashion.json"),
                                "--set", "data.format=synthetic", "--link", "1gbit", "--profile", js] + other,
                               capture_output=True, text=True, cwd=tmp)
        assert p.returncode == 2 and want in p.stderr and p.stderr.count("\n") == 1, (other, p.returncode, p.stderr)
    p = subprocess.run(base + ["--help"], capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0 and "--algorithm" in p.stdout and "auto" in p.stdout, (p.returncode, p.stdout)
    # --json onto a file that is not a predict output (a config, a summary) is refused and the file kept; a previous
    # predict output is replaced.
    precious = os.path.join(tmp, "precious.json")
    open(precious, "w").write('{"world_size": 2}\n')
    p = subprocess.run(base + ["--link", "1gbit", "--json", precious], capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 2 and "is not a predict output" in p.stderr, (p.returncode, p.stderr)
    assert open(precious).read() == '{"world_size": 2}\n'
    p = subprocess.run(base + ["--ranks", "2", "--link", "1gbit", "--json", js3], capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr

    # --measure under mpirun -np 2: both ranks profile side by side, and each row's straggler share is the slowest of N
    # drawn from their step times (more ranks: a slower one more likely), kept in --json's "spread".
    # Its own TMPDIR: Open MPI's session folder then is this test's, not /tmp's shared one, which another test's
    # mpirun ending at the same moment may be removing (seen once: "A call to mkdir was unable to create ...").
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TMPDIR=tmp)
    mpirun = ["mpirun", "-np", "2", "--oversubscribe"]
    jm = os.path.join(tmp, "measured.json")
    p = subprocess.run(mpirun + base + ["--ranks", "2,4,64", "--measure", "--json", jm], capture_output=True, text=True,
                       cwd=tmp, env=env)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, p.stderr
    assert "slowest rank: measured: 2 ranks profiling side by side" in p.stdout and "slowest" in p.stdout, p.stdout
    dm = json.load(open(jm))
    assert dm["straggler"] is None and len(dm["spread"]["work_quantiles_s_per_rank"]) == 2
    assert all(2 <= len(q) <= 1001 and q == sorted(q) and q[0] > 0 for q in dm["spread"]["work_quantiles_s_per_rank"])
    shares = [r["straggler"] for r in dm["rows"]]
    assert shares[0] <= shares[1] <= shares[2] and shares[2] > 0, shares
    # The buckets were priced from the allreduce times measured at 2 ranks, kept in link.measured (7 sizes, 4 KiB up).
    mt = dm["link"]["measured"]
    assert mt["ranks"] == 2 and [s["bytes"] for s in mt["samples"]] == [4096 * 4 ** k for k in range(7)], mt
    assert all(s["seconds"] > 0 for s in mt["samples"]) and "time measured at its size" in dm["link"]["source"], mt
    # N = 1 waits for nobody; a million ranks (the exact mixture form beyond the measured ranks) ends at once.
    p = subprocess.run(base + ["--ranks", "1,1000000", "--link", "1gbit", "--profile", jm, "--json", js3],
                       capture_output=True, text=True, cwd=tmp, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.load(open(js3))["rows"][0]["straggler"] == 0
    # --json to a pipe or /dev/null is written as before (reading it to check it would block).
    p = subprocess.run(base + ["--ranks", "2", "--link", "1gbit", "--profile", jm, "--json", "/dev/stdout"],
                       capture_output=True, text=True, cwd=tmp, timeout=60)
    assert p.returncode == 0 and '"rows"' in p.stdout, p.stderr
    assert all(r["terms_s"]["straggler"] > 0 for r in dm["rows"] if r["straggler"] > 0)
    # The same shares again from the saved file; --straggler overrides them at every N.
    p = subprocess.run(base + ["--ranks", "2,4,64", "--link", "1gbit", "--profile", jm, "--json", js3],
                       capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr
    assert [r["straggler"] for r in json.load(open(js3))["rows"]] == shares
    p = subprocess.run(base + ["--ranks", "2,4", "--link", "1gbit", "--profile", jm, "--straggler", "0.1", "--json", js3],
                       capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr
    d3 = json.load(open(js3))
    assert d3["straggler"] == 0.1 and [r["straggler"] for r in d3["rows"]] == [0.1, 0.1]
    # Contention: one process measures none (factors 1, said why); --measure profiles the step again beside
    # back-to-back allreduces of the step's gradient bytes and keeps both times of each.
    assert doc["contention"]["compute"] == 1 and doc["contention"]["communication"] == 1, doc["contention"]
    assert doc["contention"]["source"].startswith("not measured"), doc["contention"]
    cm = dm["contention"]
    if "does not grant MPI_THREAD_MULTIPLE" in cm["source"]:  # an MPI built without it: nothing beside the profile
        assert cm["compute"] == 1 and cm["communication"] == 1, cm
    else:
        grad_bytes = 4 * sum(g["floats"] for g in dm["profile"]["gradients"])
        assert cm["source"].startswith("measured") and cm["allreduces"] >= 1, cm
        assert cm["allreduce_bytes"] == min(max(grad_bytes, 4096), 16 << 20), (cm, grad_bytes)
        assert cm["compute"] == max(1.0, cm["backward_beside_s"] / cm["backward_alone_s"]), cm
        assert cm["communication"] == max(1.0, cm["allreduce_beside_s"] / cm["allreduce_alone_s"]), cm
    # A --profile file's contention is priced again (here made 3x and 2x by hand): backward runs late beside the
    # buckets, a "contention" term the one-process prediction of the same file does not have.
    d = json.load(open(jm))
    d["contention"] = {"compute": 3.0, "communication": 2.0, "source": "by hand"}
    hand = os.path.join(tmp, "hand-contention.json")
    json.dump(d, open(hand, "w"))
    d["contention"] = {"compute": 1.0, "communication": 1.0, "source": "by hand"}
    none = os.path.join(tmp, "no-contention.json")
    json.dump(d, open(none, "w"))
    steps = {}
    for name, f in (("hand", hand), ("none", none)):
        out = os.path.join(tmp, name + "-rows.json")
        p = subprocess.run(base + ["--ranks", "2", "--link", "1gbit", "--profile", f, "--json", out],
                           capture_output=True, text=True, cwd=tmp)
        assert p.returncode == 0, p.stderr
        r = json.load(open(out))
        assert r["contention"]["compute"] == {"hand": 3.0, "none": 1.0}[name], r["contention"]
        steps[name] = r["rows"][0]
    assert steps["hand"]["terms_s"]["contention"] > 0 and steps["none"]["terms_s"]["contention"] == 0, steps
    assert steps["hand"]["step_s"] > steps["none"]["step_s"], steps
    # A file without one (written before contention was measured): none assumed, and said so.
    d = json.load(open(jm))
    del d["contention"]
    old_file = os.path.join(tmp, "before-contention.json")
    json.dump(d, open(old_file, "w"))
    p = subprocess.run(base + ["--ranks", "2", "--link", "1gbit", "--profile", old_file, "--json", js3],
                       capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr
    assert json.load(open(js3))["contention"]["source"] == "not measured: " + old_file + " has none"
    # A damaged contention is exit 2 naming .contention: below 1, not a number, missing, above 1e6.
    for damage in (0.5, "fast", None, 1e7):
        d = json.load(open(jm))
        if damage is None:
            del d["contention"]["communication"]
        else:
            d["contention"]["compute"] = damage
        bad = os.path.join(tmp, "bad-contention.json")
        json.dump(d, open(bad, "w"))
        p = subprocess.run(base + ["--link", "1gbit", "--profile", bad], capture_output=True, text=True, cwd=tmp)
        assert p.returncode == 2 and ".contention" in p.stderr and p.stderr.count("\n") == 1, (damage, p.stderr)
    # A damaged spread is exit 2 naming .spread: a negative time, an empty list, unsorted, the wrong rank count.
    for damage in ("negative", "empty", "unsorted", "ranks"):
        d = json.load(open(jm))
        q = d["spread"]["work_quantiles_s_per_rank"]
        if damage == "negative":
            q[1][0] = -1
        elif damage == "empty":
            q[1] = []
        elif damage == "unsorted":
            q[0] = list(reversed(q[0]))
        else:
            d["spread"]["ranks"] = 17
        bad_spread = os.path.join(tmp, "bad-spread.json")
        json.dump(d, open(bad_spread, "w"))
        p = subprocess.run(base + ["--link", "1gbit", "--profile", bad_spread], capture_output=True, text=True, cwd=tmp)
        assert p.returncode == 2 and ".spread" in p.stderr and p.stderr.count("\n") == 1, (damage, p.returncode, p.stderr)
print("ok")
