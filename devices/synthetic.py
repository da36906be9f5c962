"""Seeded generators of simulated device data, vectorised over a whole shard.

Columns of a shard (see FleetShard.columns, docs/fleets.md):
  device_id     unicode (devices), the device's id, unique in the fleet ("d<global index>" here)
  age           float32, years, NaN when the profile has none
  locale        int16, index into fleet.vocabularies["locale"]
  perplexity    float32, the keyboard model's perplexity on the device, NaN when unknown
  phrase_start  int64 (devices + 1), CSR offsets of each device's phrases
  phrase_time   int64 (phrases), unix seconds at which each phrase was typed
  token_start   int64 (phrases + 1), CSR offsets of each phrase's tokens
  tokens        int32, indices into fleet.vocabularies["tokens"]
"""

from __future__ import annotations

import time

import numpy as np

from pfs_device.columns import Columns

LOCALES = ["en_US", "en_GB", "fr_FR", "de_DE", "es_ES"]
LOCALE_WEIGHTS = np.array([0.50, 0.15, 0.12, 0.12, 0.11])

# Figure 4's known words first, then common words; token frequency falls off as a Zipf law.
TOKENS = (
    "a and got hello home i school went world the to of you it in is that for on was with he as "
    "be at have this from or had by but what some we can out other were all there when up use "
    "your how said an each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did number "
    "sound no most people my over know water than call first who may down side been now find "
    "good new work part take get place made live where after back little only round man year came "
    "show every me give our under name very through just form sentence great think say help low "
    "line differ turn cause much mean before move right boy old too same tell does set three want "
    "air well also play small end put read hand port large spell add even land here must big high "
    "such follow act why ask men change light kind off need house picture try us again animal point "
    "mother near build self earth father head stand own page should country found answer grow study "
    "still learn plant cover food sun four between state keep eye never last let thought city tree "
    "cross farm hard start might story saw far sea draw left late run while press close night real "
    "life few north open seem together next white children begin walk example ease paper group "
    "always music those both mark often letter until mile river car feet care second book carry "
    "took science eat room friend began idea fish mountain stop once base hear horse cut sure watch "
    "color face wood main enough plain girl usual young ready above ever red list though feel talk "
    "bird soon body dog family direct pose leave song measure door product black short numeral "
    "class wind question happen complete ship area half rock order fire south problem piece told "
    "knew pass since top whole king space heard best hour better true during hundred five remember "
    "step early hold west ground interest reach fast verb sing listen six table travel less morning"
).split()

# Phrases typed far more often than their words' frequencies predict, for n-gram discovery.
PLANTED_PHRASES = [
    "hello world",
    "i went home",
    "i went to school",
    "i got home",
    "see you soon",
    "on my way",
    "thank you so much",
    "what time is it",
    "good morning",
    "talk to you later",
]
_PLANTED_SHARE = 0.35  # of all phrases typed

# Every planted word is in the vocabulary (appended if the common words lack it), each once.
TOKENS = list(dict.fromkeys(TOKENS + [t for p in PLANTED_PHRASES for t in p.split()]))

# Twice the KeyboardNGrams retention (pfs_device.streams), so that retention visibly removes phrases.
HISTORY_DAYS = 60


def generate_shard(size: int, rng: np.random.Generator, *, first_index: int = 0, now: float | None = None) -> Columns:
    """Columns for ``size`` devices drawn from ``rng``.

    ``first_index`` is the fleet-wide index of the shard's first device, so that ids are unique
    across shards. Phrase times are uniform over the ``HISTORY_DAYS`` before ``now`` (default: the
    current time), in order within each device; they are drawn after every other column, so a seed
    gives the same devices as before times existed, and ``now`` only shifts the times.
    """
    token_index = {token: i for i, token in enumerate(TOKENS)}

    # Ages: a mixture of younger and older adults, some teenagers, 4% without a profile age.
    component = rng.choice(3, size=size, p=[0.55, 0.35, 0.10])
    means = np.array([31.0, 54.0, 16.0])[component]
    spreads = np.array([8.0, 12.0, 1.5])[component]
    age = np.clip(np.rint(rng.normal(means, spreads)), 13, 95).astype(np.float32)
    age[rng.random(size) < 0.04] = np.nan

    locale = rng.choice(len(LOCALES), size=size, p=LOCALE_WEIGHTS).astype(np.int16)
    perplexity = rng.lognormal(mean=3.6, sigma=0.35, size=size).astype(np.float32)

    phrases_per_device = np.minimum(rng.poisson(4.0, size=size), 12)
    phrase_start = np.concatenate([[0], np.cumsum(phrases_per_device)]).astype(np.int64)
    phrase_count = int(phrase_start[-1])

    planted_tokens = [np.array([token_index[t] for t in p.split()], dtype=np.int32) for p in PLANTED_PHRASES]
    planted_weights = 1.0 / np.arange(1, len(PLANTED_PHRASES) + 1)
    planted_weights /= planted_weights.sum()
    is_planted = rng.random(phrase_count) < _PLANTED_SHARE
    planted_choice = rng.choice(len(PLANTED_PHRASES), size=phrase_count, p=planted_weights)
    random_length = rng.integers(1, 7, size=phrase_count)
    planted_length = np.array([len(t) for t in planted_tokens])[planted_choice]
    length = np.where(is_planted, planted_length, random_length)
    token_start = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)

    zipf = 1.0 / np.arange(1, len(TOKENS) + 1) ** 1.1
    tokens = rng.choice(len(TOKENS), size=int(token_start[-1]), p=zipf / zipf.sum()).astype(np.int32)
    for choice, phrase_tokens in enumerate(planted_tokens):  # a loop over ten phrases, not devices
        starts = token_start[:-1][is_planted & (planted_choice == choice)]
        tokens[starts[:, None] + np.arange(phrase_tokens.size)] = phrase_tokens

    # Drawn last: the draws above, and so the devices of a seed, do not depend on this.
    seconds_ago = rng.integers(0, HISTORY_DAYS * 86_400, size=phrase_count)
    device_of_phrase = np.repeat(np.arange(size), phrases_per_device)
    # Oldest first within each device; the phrases are exchangeable, so sorting the times keeps the distribution.
    chronological = np.lexsort((-seconds_ago, device_of_phrase))
    reference = int(time.time() if now is None else now)
    phrase_time = (reference - seconds_ago[chronological]).astype(np.int64)

    # As narrow as the largest index needs: npz stores fixed-width unicode, 4 bytes per character.
    digits = len(str(first_index + max(size, 1) - 1))
    device_id = np.char.add("d", np.arange(first_index, first_index + size).astype(f"<U{digits}"))

    return {
        "device_id": device_id,
        "age": age,
        "locale": locale,
        "perplexity": perplexity,
        "phrase_start": phrase_start,
        "phrase_time": phrase_time,
        "token_start": token_start,
        "tokens": tokens,
    }
