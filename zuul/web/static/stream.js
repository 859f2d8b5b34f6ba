'use strict';
// placeholder: filled in by the next commit
