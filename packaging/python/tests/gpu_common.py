"""What the GPU test scripts share (they import it from their own folder)."""
import math
import random

import torch


def paged_layout(lens, page, spare_pages=None):
    """CSR page metadata for requests of KV lengths lens: (indptr, indices, last_page_len,
    num_pages), the pages in a random order of a pool with a few spare pages."""
    pages = [math.ceil(n / page) for n in lens]
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    num_pages = indptr[-1] + (random.randint(1, 8) if spare_pages is None else spare_pages)
    indices = random.sample(range(num_pages), indptr[-1])
    last = [n - (p - 1) * page if p else 0 for n, p in zip(lens, pages)]
    return indptr, indices, last, num_pages


def softmax_with_sinks(scores, sinks=None):
    """(softmax, logsumexp) over the last axis of scores [heads, ..., keys]. sinks [heads] (or
    None): each head's attention-sink logit joins its rows as one more score whose value row is
    zero, so its probability is dropped and the logsumexp includes it."""
    if sinks is None:
        return scores.softmax(-1), scores.logsumexp(-1)
    sink = sinks.to(scores.dtype).view(-1, *[1] * (scores.dim() - 1)).expand(*scores.shape[:-1], 1)
    full = torch.cat([scores, sink], -1)
    return full.softmax(-1)[..., :-1], full.logsumexp(-1)
