"""Compare two runs' printed output (ours and microgpt.cu's): step losses and samples."""
import re

STEP = re.compile(rb"step\s+(\d+) /\s+(\d+) \| loss (\S+)")
SAMPLE = re.compile(rb"sample\s+\d+: .*")


def parse_run(text):
    """(losses by step as printed strings, sample lines, header lines) from a run's stdout bytes."""
    losses, samples, header = {}, [], {}
    for line in re.split(rb"[\r\n]", text):
        if m := STEP.fullmatch(line):
            losses[int(m.group(1))] = m.group(3).decode()
        elif SAMPLE.fullmatch(line):
            samples.append(line)
        elif line.startswith((b"num docs:", b"vocab size:", b"num params:")):
            key, value = line.split(b":", 1)
            header[key.decode()] = value.strip().decode()
    return losses, samples, header


def compare_runs(ours, theirs, tolerance=2e-3):
    """Summary dict: how many printed losses are equal, the largest difference, and whether samples agree."""
    our_losses, our_samples, our_header = parse_run(ours)
    their_losses, their_samples, their_header = parse_run(theirs)
    steps = sorted(their_losses)
    diffs = [abs(float(our_losses[s]) - float(their_losses[s])) if s in our_losses else float("inf") for s in steps]
    return {
        "steps": len(steps),
        "same_steps": sorted(our_losses) == steps,
        "losses_equal": sum(our_losses.get(s) == their_losses[s] for s in steps),
        "max_loss_diff": max(diffs, default=0.0),
        "within_tolerance": all(d <= tolerance for d in diffs),
        "tolerance": tolerance,
        "first_differing_step": next((s for s in steps if our_losses.get(s) != their_losses[s]), None),
        "samples_identical": our_samples == their_samples and len(their_samples) > 0,
        "sample_mismatches": [(a.decode(errors="replace"), b.decode(errors="replace"))
                              for a, b in zip(our_samples, their_samples) if a != b],
        "header_identical": our_header == their_header,
    }
