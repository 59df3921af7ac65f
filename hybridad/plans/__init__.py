"""The plans stage: the pipeline run once per key, then called many times --
gradients (:mod:`.plan`), Hessians and Jacobians (:mod:`.hessian`,
:mod:`.jacobian`, both staged plans of :mod:`.staged`), argument and
result-buffer validation (:mod:`.validate`)."""
