"""Pipeline managers, by the pipeline ``manager:`` value."""

from zuul.manager.dependent import DependentPipelineManager
from zuul.manager.independent import IndependentPipelineManager
from zuul.manager.supercedent import SupercedentPipelineManager

MANAGERS = {
    'independent': IndependentPipelineManager,
    'dependent': DependentPipelineManager,
    'supercedent': SupercedentPipelineManager,
    # serial: a dependent pipeline whose window is 1 (the parser sets it),
    # so one item at a time is tested and merged.
    'serial': DependentPipelineManager,
}


def manager_for(pipeline, ctx):
    try:
        cls = MANAGERS[pipeline.manager]
    except KeyError:
        raise ValueError(f'pipeline {pipeline.name}: unsupported manager '
                         f'"{pipeline.manager}"') from None
    return cls(pipeline, ctx)
