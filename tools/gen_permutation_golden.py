#!/usr/bin/python3
"""Reference orders for data/permutation.h, written independently of the C++ code: Philox4x32-10
(Random123's constants; its known-answer vector is checked first) feeding a Fisher-Yates shuffle
with Lemire's bounded draws. Prints the lists that tests/data/test_data_loader.cpp pins.

    /usr/bin/python3 tools/gen_permutation_golden.py
"""

M32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    c = list(counter)
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c


def epoch_draws(seed, epoch):
    """64-bit draws: block b = philox(counter {b lo, b hi, epoch lo, epoch hi}, key = seed),
    giving words (0 | 1 << 32) then (2 | 3 << 32)."""
    block = 0
    while True:
        w = philox4x32_10([block & M32, block >> 32, epoch & M32, epoch >> 32],
                          [seed & M32, seed >> 32])
        yield w[0] | (w[1] << 32)
        yield w[2] | (w[3] << 32)
        block += 1


def below(draws, bound):
    m = next(draws) * bound
    low = m & ((1 << 64) - 1)
    if low < bound:
        threshold = ((1 << 64) - bound) % bound
        while low < threshold:
            m = next(draws) * bound
            low = m & ((1 << 64) - 1)
    return m >> 64


def epoch_permutation(n, seed, epoch):
    order = list(range(n))
    draws = epoch_draws(seed, epoch)
    for i in range(n - 1, 0, -1):
        j = below(draws, i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def main():
    assert philox4x32_10([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    for n, seed, epoch in [(10, 42, 0), (10, 42, 3), (25, 2**40 + 7, 2**33 + 1)]:
        print(f"n={n} seed={seed} epoch={epoch}: {', '.join(map(str, epoch_permutation(n, seed, epoch)))}")


if __name__ == "__main__":
    main()
