"""What the GPU test scripts share (they import it from their own folder)."""
import math
import random


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
