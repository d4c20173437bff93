"""An example third-party credit family for creditaudit (the family ``novelty``).

See :mod:`creditaudit_example_family.novelty`.
"""

from creditaudit_example_family.novelty import NoveltyFamily, novelty_credit, novelty_family

__all__ = ["NoveltyFamily", "novelty_credit", "novelty_family"]
