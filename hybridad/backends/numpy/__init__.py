"""The numpy reference backend: the graph as one generated Python function
calling numpy with ``out=`` (:mod:`.program`); the oracle of the others."""
