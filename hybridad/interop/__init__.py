"""Interop with the libraries hybridad plugs into: ``scipy.optimize``
(:mod:`.scipy`, public as ``hybridad.scipy``) and dask (:mod:`.dask`, public
as ``hybridad.dask``)."""
