#!/usr/bin/python3
"""Plots one or several ringtrain runs into a PNG, without a notebook.

usage: scripts/plot_run.py RUN_DIR... [--out FILE] [--title TEXT]

Each RUN_DIR is a run's output.dir. Three panels: the training loss at each logged step and the test accuracy at
each epoch (both from metrics.jsonl, against the global step, so a resumed run continues its curve), and the time
split of each run (summary.json's phase_s: data, forward, backward, waiting for gradients, optimizer) as a share of
the run's training time. Several runs share the panels, one colour each, labelled with their folder names.
--out defaults to RUN_DIR/plot.png for one run and to runs.png for several.

Needs matplotlib (Debian: apt-get install python3-matplotlib; scripts/setup.sh installs it). Draws with the Agg
backend: no display needed. Exit 2 with one line when a RUN_DIR holds no metrics.jsonl or a line of it is not JSON,
or when --out's folder is missing or not writable (checked before drawing).
"""
import argparse
import json
import os
import sys

PHASES = [("data", "input"), ("forward", "forward"), ("backward", "backward"),
          ("sync_wait", "waiting for gradients"), ("optimizer", "optimizer")]


def fail(message):
    print(f"plot_run.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def read_run(run_dir):
    """The run's step losses and epoch accuracies by global step (a later line for the same step wins: a run resumed
    from an earlier checkpoint logs those steps again), and its summary (None when there is none yet)."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(metrics):
        fail(f"{metrics}: not found; give a run's output.dir (it holds metrics.jsonl)")
    loss, accuracy = {}, {}
    with open(metrics) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{metrics}:{n}: not JSON ({e.msg}); is it a ringtrain metrics file?")
            step = rec.get("global_step")
            if rec.get("type") == "step" and step is not None and rec.get("loss") is not None:
                loss[step] = rec["loss"]
            elif rec.get("type") == "epoch" and step is not None and rec.get("test_accuracy") is not None:
                accuracy[step] = rec["test_accuracy"]
    summary = None
    path = os.path.join(run_dir, "summary.json")
    if os.path.isfile(path):
        try:
            with open(path) as f:
                summary = json.load(f)
        except json.JSONDecodeError as e:
            fail(f"{path}: not JSON ({e.msg})")
    return sorted(loss.items()), sorted(accuracy.items()), summary


def main():
    ap = argparse.ArgumentParser(description="Plot ringtrain runs (loss, accuracy, time split) into a PNG.")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a run's output.dir")
    ap.add_argument("--out", help="PNG to write (default: RUN_DIR/plot.png for one run, runs.png for several)")
    ap.add_argument("--title", help="figure title (default: the run folders' names)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"plot_run.py: error: needs matplotlib ({e}); apt-get install python3-matplotlib", file=sys.stderr)
        sys.exit(1)

    runs = []
    for d in args.runs:
        if not os.path.isdir(d):
            fail(f"{d}: not a folder; give a run's output.dir")
        label = os.path.basename(os.path.normpath(d)) or d
        runs.append((label,) + read_run(d))
    out = args.out or (os.path.join(args.runs[0], "plot.png") if len(args.runs) == 1 else "runs.png")
    # Checked before drawing, so a typo in --out costs one line, not a traceback after the work.
    folder = os.path.dirname(out) or "."
    if os.path.isdir(out):
        fail(f"--out {out}: is a folder; give a file name, e.g. {os.path.join(out, 'plot.png')}")
    if not os.path.isdir(folder):
        fail(f"--out {out}: folder {folder} does not exist; create it or choose another --out")
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"--out {out}: folder {folder} is not writable; choose another --out")

    fig, (ax_loss, ax_acc, ax_time) = plt.subplots(1, 3, figsize=(15, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, loss, accuracy, _) in enumerate(runs):
        c = colours[i % len(colours)]
        if loss:
            ax_loss.plot([s for s, _ in loss], [v for _, v in loss], color=c, label=label, linewidth=1.2)
        if accuracy:
            ax_acc.plot([s for s, _ in accuracy], [v for _, v in accuracy], color=c, marker="o", label=label)
    ax_loss.set(title="training loss (logged steps)", xlabel="global step", ylabel="loss")
    ax_acc.set(title="test accuracy (each epoch)", xlabel="global step", ylabel="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "nothing logged yet", ha="center", va="center", transform=ax.transAxes)

    # Time split: one horizontal bar per run, each phase its share of the phases' total.
    labels, lefts = [], [0.0] * len(runs)
    for k, (phase, name) in enumerate(PHASES):
        shares = []
        for label, _, _, summary in runs:
            phase_s = (summary or {}).get("phase_s") or {}
            total = sum(phase_s.get(p, 0.0) for p, _ in PHASES)
            shares.append(100.0 * phase_s.get(phase, 0.0) / total if total > 0 else 0.0)
        ax_time.barh(range(len(runs)), shares, left=lefts, color=colours[k % len(colours)], label=name)
        lefts = [a + b for a, b in zip(lefts, shares)]
    for label, _, _, summary in runs:
        wall = (summary or {}).get("wall_s")
        labels.append(f"{label}\n{wall:.1f} s" if wall is not None else f"{label}\n(no summary.json)")
    ax_time.set_yticks(range(len(runs)))
    ax_time.set_yticklabels(labels, fontsize="small")
    ax_time.set(title="time split of training (rank 0)", xlabel="% of the phases' time", xlim=(0, 100))
    ax_time.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)
    fig.suptitle(args.title or ", ".join(label for label, *_ in runs))
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        fail(f"--out {out}: cannot write ({e.strerror or e})")
    print(f"plot_run.py: wrote {out}")


if __name__ == "__main__":
    main()
