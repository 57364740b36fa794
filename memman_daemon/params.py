"""The parameter specs live in the shared package (``memman.params``): the method declarations
(``memman.api``) hold them. This name stays for the daemon's modules that import them."""

from memman.params import *  # noqa: F403
