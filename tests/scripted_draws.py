"""A stand-in for random.Random that hands out given draws, for tests that fix each flip by hand."""


class Scripted:
    """A random.Random stand-in whose random() returns the given draws in order."""

    def __init__(self, draws):
        self.draws = list(draws)

    def random(self):
        return self.draws.pop(0)
