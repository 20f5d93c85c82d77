using from '../../app/srv/target';
using from '@sap/cds/srv/outbox';
