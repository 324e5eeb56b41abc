"""Opens headroom's expandable-segments snapshot fixture with PyTorch's own memory_viz code.

tests/fixtures/memory/expandable_snapshot.pickle is what `headroom demo --snapshot` writes with
HEADROOM_ALLOC_CONF=expandable_segments:True (segment_map / segment_unmap events, is_expandable
segments). This script runs torch.cuda._memory_viz on it: `stats` (segsum, which asserts that
every segment's blocks add up), `trace`, and the two HTML plots that embed the pickle for
MemoryViz.js (trace_plot, segment_plot). The C++ test tests/memory/test_memory_viz_fixture.cpp
checks the same file's structure without Python.

    python3 tools/check_memory_viz.py                       # check the committed fixture
    python3 tools/check_memory_viz.py --regenerate build/headroom   # rewrite it first

Needs torch (any version with torch.cuda._memory_viz; no GPU).
"""
import argparse
import os
import pickle
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, 'tests', 'fixtures', 'memory', 'expandable_snapshot.pickle')
# A one-layer GPT-2 shape: the layer's weights, gradients and AdamW moments fill small-pool
# pages, the 4 MiB embeddings' the first large-pool page, and the 32 MiB of logits two more,
# which --empty-cache unmaps once the logits are freed.
DEMO_ARGS = ['demo', '--device', 'cpu', '--layers', '1', '--d-model', '256', '--vocab', '4096',
             '--context', '256', '--batch', '8', '--empty-cache']


def regenerate(binary):
    env = dict(os.environ, HEADROOM_ALLOC_CONF='expandable_segments:True')
    env.pop('PYTORCH_CUDA_ALLOC_CONF', None)
    os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
    subprocess.run([binary] + DEMO_ARGS + ['--snapshot', FIXTURE], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    print(f'wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)')


def check(memory_viz):
    with open(FIXTURE, 'rb') as f:
        snapshot = pickle.load(f)
    segments = snapshot['segments']
    assert segments and all(s['is_expandable'] for s in segments), 'expected expandable segments'
    actions = [e['action'] for e in snapshot['device_traces'][0]]
    assert 'segment_map' in actions and 'segment_unmap' in actions, sorted(set(actions))

    stats = memory_viz.segsum(snapshot)  # asserts each segment's blocks add up
    reserved = sum(s['total_size'] for s in segments)
    assert f'total_reserved: {memory_viz.Bytes(reserved)}' in stats, stats
    text = memory_viz.trace(snapshot)
    assert f'{len(actions)} entries' in text and "'segment_map'" in text, text[:400]
    for plot in (memory_viz.trace_plot(snapshot), memory_viz.trace_plot(snapshot, plot_segments=True),
                 memory_viz.segment_plot(snapshot)):
        assert 'snapshot.pickle' in plot and 'MemoryViz.js' in plot
    print(stats)
    print(f'memory_viz read {len(segments)} segments and {len(actions)} trace entries '
          f'({actions.count("segment_map")} segment_map, {actions.count("segment_unmap")} '
          f'segment_unmap)')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--regenerate', metavar='HEADROOM',
                        help='rewrite the fixture with this headroom binary first')
    args = parser.parse_args()
    if args.regenerate:
        regenerate(args.regenerate)
    from torch.cuda import _memory_viz
    check(_memory_viz)
    return 0


if __name__ == '__main__':
    sys.exit(main())
